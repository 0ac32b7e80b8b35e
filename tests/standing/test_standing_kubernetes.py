"""What a Kubernetes provisioner wrote on a volume or snapshot, read from tags or from a
Compute Engine description: the JSON object the GKE PD CSI driver writes, and nothing from
free text, other JSON, or a description too long to be the driver's."""

from __future__ import annotations

import pytest

from costguard.standing.kubernetes import claim_of, description_meta, volume_snapshot_of

DRIVER = ('{"kubernetes.io/created-for/pv/name":"pvc-1","kubernetes.io/created-for/pvc/name"'
          ':"data-0","kubernetes.io/created-for/pvc/namespace":"prod",'
          '"storage.gke.io/created-by":"pd.csi.storage.gke.io"}')


def test_the_driver_s_description_names_the_claim() -> None:
    assert claim_of(description_meta(DRIVER)) == \
        "Kubernetes PersistentVolume pvc-1 (claim prod/data-0)"
    assert claim_of({"CSIVolumeName": "pvc-2"}) == "Kubernetes PersistentVolume pvc-2"
    assert volume_snapshot_of({"CSIVolumeSnapshotName": "snapshot-9"}) == \
        "Kubernetes VolumeSnapshot snapshot-9"


@pytest.mark.parametrize("text", [
    "", "scratch disk for the llm run", "[1, 2]", '{"a": 1}', "{not json",
    '{"kubernetes.io/created-for/pv/name": ' + "9" * 5000 + "}",  # a 5,000-digit number
    "{" + " " * 9000 + "}",  # too long to be the driver's
    '{"kubernetes.io/created-for/pv/name": {"nested": "x"}}'])
def test_anything_else_names_nothing(text: str) -> None:
    assert claim_of(description_meta(text)) is None
    assert volume_snapshot_of(description_meta(text)) is None
