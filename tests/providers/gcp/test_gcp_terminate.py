"""Terminate on GCP against the local Compute fake: createSnapshot per disk, then delete."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from costguard.demo.gcp_fake.disks import FakeDisk
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, Instance, InstanceState
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.terminate import snapshot_name

ZONE = "us-central1-a"


def _stopped(fake: FakeGcp, provider: GcpProvider, name: str = "old-a100",
             disks: list[FakeDisk] | None = None) -> Instance:
    fake.compute.add_instance("ml-prod", ZONE, name, "a2-highgpu-1g", status="TERMINATED",
                              disks=disks)
    found: Instance = next(i for i in provider.list_instances().instances if i.name == name)
    return found


def _exists(fake: FakeGcp, name: str) -> bool:
    try:
        fake.compute.instance("ml-prod", ZONE, name)
    except KeyError:
        return False
    return True


DISKS = [FakeDisk("old-a100", size_gb=200, boot=True),
         FakeDisk("old-a100-data", size_gb=1000, disk_type="pd-ssd", auto_delete=False)]


def test_terminate_snapshots_each_persistent_disk_then_deletes(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.operation_delay_s = 0.2  # operations finish later: each one is waited on
    provider = make_provider()
    inst = _stopped(fake, provider, disks=[*DISKS, FakeDisk("local-ssd", scratch=True)])

    result = provider.terminate(inst, snapshot=True, dry_run=False)

    assert result.outcome is ActionOutcome.DONE, result.detail
    assert result.state_after is InstanceState.TERMINATED
    assert not _exists(fake, "old-a100")
    names = {snapshot_name(inst.instance_id, d) for d in ("old-a100", "old-a100-data")}
    assert {n for _, n in fake.compute.snapshots} == names
    assert all(s["status"] == "READY" for s in fake.compute.snapshots.values())
    assert all(s["labels"] == {"costguard_snapshot-of": inst.instance_id}
               for s in fake.compute.snapshots.values())
    assert fake.compute.calls["POST create_snapshot"] == 2
    assert fake.compute.calls["DELETE delete"] == 1
    assert "disk old-a100-data kept (autoDelete is false" in result.detail
    assert "local SSD local-ssd discarded" in result.detail
    assert [d.name for _, _, d in fake.compute.detached_disks] == ["old-a100-data"]


def test_terminate_without_snapshot_only_deletes(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    provider = make_provider()
    inst = _stopped(fake, provider)

    result = provider.terminate(inst, snapshot=False, dry_run=False)

    assert result.outcome is ActionOutcome.DONE
    assert fake.compute.snapshots == {} and not _exists(fake, "old-a100")


def test_dry_run_reads_and_changes_nothing(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    provider = make_provider()
    inst = _stopped(fake, provider, disks=DISKS)

    result = provider.terminate(inst, snapshot=True, dry_run=True)

    assert result.outcome is ActionOutcome.DRY_RUN
    assert "would snapshot old-a100, old-a100-data and delete old-a100" in result.detail
    assert _exists(fake, "old-a100") and fake.compute.snapshots == {}
    assert fake.compute.calls["POST create_snapshot"] == fake.compute.calls["DELETE delete"] == 0


@pytest.mark.parametrize("change", ["started", "protected", "recreated"])
def test_terminate_skips_a_vm_that_changed_since_inventory(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider], change: str
) -> None:
    provider = make_provider()
    inst = _stopped(fake, provider)
    if change == "started":
        fake.compute.set_status("ml-prod", ZONE, "old-a100", "RUNNING")
    elif change == "protected":
        fake.compute.relabel("ml-prod", ZONE, "old-a100", {"costguard_protect": "true"})
    else:
        fake.compute.add_instance("ml-prod", ZONE, "old-a100", status="TERMINATED")

    result = provider.terminate(inst, snapshot=True, dry_run=False)

    assert result.outcome is ActionOutcome.SKIPPED
    assert {"started": "not stopped", "protected": "costguard_protect",
            "recreated": "recreated"}[change] in result.detail
    assert _exists(fake, "old-a100") and fake.compute.snapshots == {}


def test_a_failed_snapshot_means_no_delete(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    provider = make_provider()
    inst = _stopped(fake, provider)
    fake.compute.snapshot_error = "quota SNAPSHOTS exceeded"

    result = provider.terminate(inst, snapshot=True, dry_run=False)

    assert result.outcome is ActionOutcome.FAILED
    assert "quota SNAPSHOTS exceeded" in result.detail and "not deleted" in result.detail
    assert _exists(fake, "old-a100")


def test_a_retry_after_a_timeout_reuses_the_snapshot(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.operation_delay_s = 30.0  # the snapshot outlasts the operation timeout
    fake.compute.max_wait_s = 0.05
    provider = make_provider(operation_timeout_s=0.2)
    inst = _stopped(fake, provider)

    with pytest.raises(ProviderError) as caught:
        provider.terminate(inst, snapshot=True, dry_run=False)
    assert caught.value.retryable and _exists(fake, "old-a100")

    fake.compute.operation_delay_s = 0.0
    for op in fake.compute._ops.values():  # the snapshot finishes meanwhile
        op.done_at = 0.0
    result = provider.terminate(inst, snapshot=True, dry_run=False)

    assert result.outcome is ActionOutcome.DONE, result.detail
    assert len(fake.compute.snapshots) == 1  # the same request id: the same snapshot
    assert not _exists(fake, "old-a100")
