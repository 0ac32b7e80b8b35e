"""Who owns a Compute Engine VM, from what `aggregatedList` already returns: its labels and
its metadata, with no extra call.

The conventions, from Google Cloud's documentation:
- a VM a managed instance group created carries the metadata item `created-by` with the
  group's partial URL: `projects/NUMBER/zones/ZONE/instanceGroupManagers/NAME` (zonal) or
  `projects/NUMBER/regions/REGION/instanceGroupManagers/NAME` (regional);
- GKE nodes carry the labels `goog-k8s-cluster-name` and `goog-k8s-node-pool-name` (and are
  themselves in the node pool's managed instance group);
- Dataproc cluster VMs carry `goog-dataproc-cluster-name`; Batch job VMs `batch-job-id` or
  `goog-batch-job-uid`; Vertex AI managed VMs labels starting `goog-vertex` or `goog-caip`;
- Ray's cluster launcher labels `ray-cluster-name`; SkyPilot adds `skypilot-cluster-name`.

As on AWS, the owner that schedules work on the VM wins over the group that holds it: a GKE
node is the cluster's, not its instance group's.

What is not read here: a group's target size and its autoscaler's minimum (the
instanceGroupManagers and autoscalers listings). Without them no scale-in acts on a GCP
group member; it is reported instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from costguard.model import Owner, OwnerKind

# a cluster's own label on its VMs, in order (SkyPilot adds Ray's label to its own)
_CLUSTERS = (("goog-dataproc-cluster-name", OwnerKind.DATAPROC),
             ("skypilot-cluster-name", OwnerKind.SKYPILOT),
             ("ray-cluster-name", OwnerKind.RAY))
_CREATED_BY = re.compile(
    r"(?:.*/)?projects/[^/]+/(zones|regions)/([^/]+)/instanceGroupManagers/([^/]+)$")


def mig_of(created_by: str | None) -> tuple[str, str, bool] | None:
    """(group name, zone or region, regional?) from a `created-by` value; None: not a MIG."""
    if not created_by:
        return None
    found = _CREATED_BY.match(created_by.strip())
    if found is None:
        return None
    where, scope, name = found.groups()
    return name, scope, where == "regions"


def owner_from_labels(labels: Mapping[str, str], metadata: Mapping[str, str]) -> Owner | None:
    """The owner the VM's labels and metadata name, most specific first; None: a pet VM."""
    mig = mig_of(metadata.get("created-by"))

    def owner(kind: OwnerKind, name: str, via: str, cluster: str | None = None) -> Owner:
        scope = mig[1] if mig else labels.get("goog-k8s-cluster-location", "")
        return Owner(kind=kind, name=name, scope=scope, cluster=cluster, via=via)

    pool = labels.get("goog-k8s-node-pool-name")
    if pool or labels.get("goog-k8s-cluster-name"):
        cluster = labels.get("goog-k8s-cluster-name")
        return owner(OwnerKind.GKE, pool or cluster or "", "label goog-k8s-node-pool-name",
                     cluster)
    for key in ("batch-job-id", "goog-batch-job-uid"):
        if labels.get(key):
            return owner(OwnerKind.GCP_BATCH, labels[key], f"label {key}")
    vertex = sorted(k for k in labels if k.startswith(("goog-vertex", "goog-caip")))
    if vertex:
        return owner(OwnerKind.VERTEX, labels[vertex[0]] or vertex[0], f"label {vertex[0]}")
    for key, kind in _CLUSTERS:  # the label names the cluster, which is the owner
        if labels.get(key):
            return owner(kind, labels[key], f"label {key}", labels[key])
    if mig is not None:
        return owner(OwnerKind.MIG, mig[0], "metadata created-by")
    return None
