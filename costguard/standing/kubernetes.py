"""Storage a Kubernetes controller made: what its provisioners write on a volume or
snapshot, on either cloud. Such storage stays the controller's (a StatefulSet scaled to
zero detaches its volumes; a VolumeSnapshot's snapshot backs a restore): reported as paid
for, never deleted by costguard.

The metadata is the resource's tags (EBS: the CSI driver's `CSIVolumeName`,
`CSIVolumeSnapshotName`, the in-tree provisioner's `kubernetes.io/created-for/...`) or, on
Compute Engine, the JSON object the PD CSI driver writes as the disk's or snapshot's
`description` (`kubernetes.io/created-for/pv/name`, `.../volumesnapshot/name`,
`storage.gke.io/created-by`), read with `description_meta`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

CREATED_FOR = "kubernetes.io/created-for/"
_LONGEST = 8192  # a description the driver writes is a few hundred characters


def description_meta(text: str) -> dict[str, str]:
    """A description's JSON object of strings, or {} for anything else (free text, a
    description too long to be the driver's, JSON that is not an object of strings)."""
    if not text.startswith("{") or len(text) > _LONGEST:
        return {}
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return ({str(k): v for k, v in doc.items() if isinstance(v, str)}
            if isinstance(doc, dict) else {})


def claim_of(meta: Mapping[str, str]) -> str | None:
    """The PersistentVolume (and its claim) a volume backs, or None."""
    pv = meta.get("CSIVolumeName") or meta.get(f"{CREATED_FOR}pv/name")
    if not pv:
        return None
    ns, pvc = meta.get(f"{CREATED_FOR}pvc/namespace"), meta.get(f"{CREATED_FOR}pvc/name")
    return f"Kubernetes PersistentVolume {pv}" + (f" (claim {ns}/{pvc})" if ns and pvc else "")


def volume_snapshot_of(meta: Mapping[str, str]) -> str | None:
    """The VolumeSnapshot a snapshot was taken for, or None."""
    name = meta.get("CSIVolumeSnapshotName") or meta.get(f"{CREATED_FOR}volumesnapshot/name")
    if not name:
        return None
    ns = meta.get(f"{CREATED_FOR}volumesnapshot/namespace")
    return f"Kubernetes VolumeSnapshot {f'{ns}/' if ns else ''}{name}"
