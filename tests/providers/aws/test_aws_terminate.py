"""Terminate on AWS against moto: snapshots first (waited for), dry run via DryRun, re-check."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory, run_instances

from costguard.errors import ProviderError
from costguard.model import ActionOutcome, Instance, InstanceState
from costguard.providers.aws import AwsProvider
from costguard.providers.aws import terminate as term

pytestmark = pytest.mark.usefixtures("moto")


def _ec2() -> Any:
    return boto3.client("ec2", region_name=REGION)


def _state(instance_id: str) -> str:
    raw = _ec2().describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return str(raw["State"]["Name"])


def _stopped(make_provider: ProviderFactory, **kwargs: Any) -> tuple[AwsProvider, Instance]:
    (raw,) = run_instances(**kwargs)
    _ec2().stop_instances(InstanceIds=[raw["InstanceId"]])
    provider = make_provider()
    (inst,) = provider.list_instances().instances
    assert inst.state is InstanceState.STOPPED
    return provider, inst


def _snapshots_of(instance_id: str) -> list[dict[str, Any]]:
    page = _ec2().describe_snapshots(OwnerIds=["self"], Filters=[
        {"Name": "tag:costguard:snapshot-of", "Values": [instance_id]}])
    return list(page["Snapshots"])


def test_terminate_snapshots_every_volume_then_terminates(make_provider: ProviderFactory) -> None:
    provider, inst = _stopped(make_provider)
    data = _ec2().create_volume(Size=100, AvailabilityZone=inst.zone, VolumeType="gp3")
    _ec2().attach_volume(VolumeId=data["VolumeId"], InstanceId=inst.instance_id, Device="/dev/sdf")
    volumes = {v.volume_id for v in term.volumes_of(
        _ec2().describe_instances(InstanceIds=[inst.instance_id])
        ["Reservations"][0]["Instances"][0])}
    assert len(volumes) == 2  # the root volume and /dev/sdf (DeleteOnTermination false)

    result = provider.terminate(inst, snapshot=True, dry_run=False)

    assert result.outcome is ActionOutcome.DONE, result.detail
    assert result.state_after is InstanceState.TERMINATED
    assert _state(inst.instance_id) == "terminated"
    snaps = _snapshots_of(inst.instance_id)
    assert {s["VolumeId"] for s in snaps} == volumes
    assert all(s["SnapshotId"] in result.detail for s in snaps)
    assert "kept (DeleteOnTermination is false" in result.detail


def test_terminate_without_snapshot_takes_none(make_provider: ProviderFactory) -> None:
    provider, inst = _stopped(make_provider)

    result = provider.terminate(inst, snapshot=False, dry_run=False)

    assert result.outcome is ActionOutcome.DONE and result.detail == "terminated"
    assert _state(inst.instance_id) == "terminated"
    assert _snapshots_of(inst.instance_id) == []


def test_dry_run_asks_ec2_and_changes_nothing(make_provider: ProviderFactory) -> None:
    provider, inst = _stopped(make_provider)

    result = provider.terminate(inst, snapshot=True, dry_run=True)

    assert result.outcome is ActionOutcome.DRY_RUN
    assert "permission verified" in result.detail and "would snapshot" in result.detail
    assert _state(inst.instance_id) == "stopped"
    assert _snapshots_of(inst.instance_id) == []


@pytest.mark.parametrize("change", ["started", "protected"])
def test_terminate_skips_an_instance_started_or_protected_meanwhile(
    make_provider: ProviderFactory, change: str
) -> None:
    provider, inst = _stopped(make_provider)
    if change == "started":
        _ec2().start_instances(InstanceIds=[inst.instance_id])
    else:
        _ec2().create_tags(Resources=[inst.instance_id],
                           Tags=[{"Key": "costguard:protect", "Value": "true"}])

    result = provider.terminate(inst, snapshot=True, dry_run=False)

    assert result.outcome is ActionOutcome.SKIPPED
    assert ("not stopped" if change == "started" else "costguard:protect") in result.detail
    assert _state(inst.instance_id) != "terminated"
    assert _snapshots_of(inst.instance_id) == []


class _Pending:
    """Makes DescribeSnapshots by id report `pending` for the first `times` calls."""

    def __init__(self, times: int, state: str = "pending") -> None:
        self.times, self.state, self.calls = times, state, 0

    def __call__(self, parsed: dict[str, Any], **_: Any) -> None:
        if self.calls < self.times:
            for snap in parsed.get("Snapshots", []):
                snap["State"] = self.state
        self.calls += 1


def _hooked(times: int, state: str = "pending") -> tuple[Any, _Pending]:
    ec2 = _ec2()
    hook = _Pending(times, state)
    ec2.meta.events.register("after-call.ec2.DescribeSnapshots", hook)
    return ec2, hook


def test_terminate_waits_until_the_snapshots_complete(make_provider: ProviderFactory) -> None:
    _, inst = _stopped(make_provider)
    ec2, _ = _hooked(times=3)  # the lookup of earlier snapshots, then two pending polls
    slept: list[float] = []

    result = term.terminate(ec2, inst, snapshot=True, dry_run=False,
                            waiting=term.Waiting(timeout_s=100, poll_s=5, sleep=slept.append))

    assert result.outcome is ActionOutcome.DONE
    assert slept == [5, 5]
    assert _state(inst.instance_id) == "terminated"


def test_a_snapshot_still_pending_at_the_timeout_defers_and_the_retry_reuses_it(
    make_provider: ProviderFactory,
) -> None:
    _, inst = _stopped(make_provider)
    ec2, _ = _hooked(times=10**6)
    ticks = iter(range(0, 10**6, 30))

    with pytest.raises(ProviderError) as caught:
        term.terminate(ec2, inst, snapshot=True, dry_run=False, waiting=term.Waiting(
            timeout_s=60, poll_s=30, sleep=lambda s: None, monotonic=lambda: next(ticks)))

    assert caught.value.retryable and "not completed" in str(caught.value)
    assert _state(inst.instance_id) == "stopped"
    (first,) = _snapshots_of(inst.instance_id)
    result = term.terminate(_ec2(), inst, snapshot=True, dry_run=False)
    assert result.outcome is ActionOutcome.DONE
    assert [s["SnapshotId"] for s in _snapshots_of(inst.instance_id)] == [first["SnapshotId"]]


def test_a_failed_snapshot_means_no_termination(make_provider: ProviderFactory) -> None:
    _, inst = _stopped(make_provider)
    ec2, _ = _hooked(times=10**6, state="error")

    result = term.terminate(ec2, inst, snapshot=True, dry_run=False,
                            waiting=term.Waiting(sleep=lambda s: None))

    assert result.outcome is ActionOutcome.FAILED and "failed" in result.detail
    assert _state(inst.instance_id) == "stopped"


def test_the_act_stage_terminates_through_the_aws_provider(
    make_provider: ProviderFactory, tmp_path: Any
) -> None:
    """End to end: a policy's due termination goes through AwsProvider.terminate."""
    from datetime import timedelta

    from sqlmodel import select

    from costguard.actions.lifecycle import AfterStop
    from costguard.actions.runner import ActionRunner
    from costguard.actions.stats import ActStats
    from costguard.costs.attribution import Attributor
    from costguard.policy.load import parse_policy_text
    from costguard.store.db import Database
    from costguard.store.inventory import record_inventory
    from costguard.store.tables import ActionJournalRow, PolicyStateRow

    provider, inst = _stopped(make_provider)
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    now = inst.observed_at
    policy = parse_policy_text("""\
policies:
  - name: idle
    mode: enforce
    filters: {gpu: true, state: running}
    condition: {idle: {below: 5, for: 45m}}
    actions:
      - stop: {grace: 15m}
      - terminate: {after_stopped: 2d, warn_before: 12h, snapshot: true}
""").policies[0]
    stopped_at = now - timedelta(days=3)
    with db.session() as s:
        record_inventory(s, "aws", [inst], stopped_at, complete=True)
        s.add(PolicyStateRow(policy="idle", provider="aws", instance_id=inst.instance_id,
                             state="term-warned", since=stopped_at,
                             deadline=now - timedelta(hours=1)))
    runner = ActionRunner(db, {"aws": provider}, Attributor())
    stats = ActStats()

    AfterStop(runner).run(policy, now, None, stats)

    assert stats.terminated["idle"] == 1
    assert _state(inst.instance_id) == "terminated"
    assert len(_snapshots_of(inst.instance_id)) == 1
    with db.session() as s:
        (row,) = s.exec(select(ActionJournalRow).where(ActionJournalRow.action == "terminate"))
        assert row.status == "done" and "snapshot snap-" in row.detail
    db.dispose()
