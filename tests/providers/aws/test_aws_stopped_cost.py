"""What a stopped instance still costs on AWS: its EBS volumes, priced from the shipped table."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory, run_instances

from costguard.actions.messages import after_stop_note
from costguard.actions.runner import ActionRunner
from costguard.costs.attribution import Attributor
from costguard.model import ActionOutcome
from costguard.policy.load import parse_policy_text
from costguard.providers.aws.disks import ebs_table, volume_usd_per_month
from costguard.store.db import Database

pytestmark = pytest.mark.usefixtures("moto")


def test_stopped_cost_prices_every_attached_volume(
    make_provider: ProviderFactory, tmp_path: Any
) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    (raw,) = run_instances()  # moto's root volume: 8 GB gp2
    data = ec2.create_volume(Size=100, AvailabilityZone=raw["Placement"]["AvailabilityZone"],
                             VolumeType="gp3", Iops=6000)
    ec2.attach_volume(VolumeId=data["VolumeId"], InstanceId=raw["InstanceId"], Device="/dev/sdf")
    provider = make_provider()
    (inst,) = provider.list_instances().instances

    quote = provider.stopped_cost(inst)

    # 8 GB gp2 x $0.10 + 100 GB gp3 x $0.08 + 3,000 IOPS above the free 3,000 x $0.005
    # = $0.80 + $8.00 + $15.00 = $23.80 a month = $0.0326/h
    assert quote is not None and quote.usd_per_hour == 0.0326
    assert "8 GB gp2" in quote.source and "100 GB gp3" in quote.source
    runner = ActionRunner(Database(f"sqlite:///{tmp_path / 'cg.db'}"), {"aws": provider},
                          Attributor())
    policy = parse_policy_text("policies:\n  - name: p\n    condition: {idle: {for: 1h}}\n"
                               "    actions:\n      - stop: {grace: 15m}\n").policies[0]
    note = after_stop_note(runner.providers, policy, inst)
    assert "While stopped it still costs $0.0326/h" in note


def test_volume_prices_follow_the_table() -> None:
    table = ebs_table()
    assert volume_usd_per_month({"VolumeType": "io2", "Size": 100, "Iops": 1000}, table) == (
        100 * 0.125 + 1000 * 0.065)
    assert volume_usd_per_month({"VolumeType": "gp3", "Size": 10, "Iops": 3000,
                                 "Throughput": 225}, table) == 10 * 0.08 + 100 * 0.04
    assert volume_usd_per_month({"VolumeType": "future-type", "Size": 10}, table) is None
    assert datetime.fromisoformat(table.as_of).replace(tzinfo=UTC)  # dated


def test_stopped_cost_is_none_when_no_volume_is_attached(make_provider: ProviderFactory) -> None:
    run_instances()
    provider = make_provider()
    (inst,) = provider.list_instances().instances
    ghost = inst.model_copy(update={"instance_id": "i-0000000000000dead"})
    assert provider.stopped_cost(inst) is not None
    assert provider.stopped_cost(ghost) is None  # nothing attached to that id


def test_volumes_are_read_while_stop_instances_is_in_flight(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    """stop_many reads the volumes beside StopInstances, not after it: StopInstances is
    held until DescribeVolumes has been asked (held for good if it were asked after)."""
    run_instances(count=2)
    asked = threading.Event()
    order: list[str] = []
    lost: list[str] = []

    def volumes_asked(**_: Any) -> None:
        order.append("DescribeVolumes")
        asked.set()

    def hold_stop(params: dict[str, Any], **_: Any) -> None:
        order.append("StopInstances" if asked.wait(10) else "StopInstances alone")
        params["InstanceIds"] = [i for i in params["InstanceIds"] if i not in lost]

    # registered before the provider makes its clients (they copy the session's handlers)
    session.events.register("provide-client-params.ec2.DescribeVolumes", volumes_asked)
    session.events.register("provide-client-params.ec2.StopInstances", hold_stop)
    provider = make_provider()
    stopped, kept_running = sorted(provider.list_instances().instances,
                                   key=lambda i: i.instance_id)
    lost.append(kept_running.instance_id)  # its stop never reaches EC2

    results = provider.stop_many([stopped, kept_running], dry_run=False)

    assert order == ["DescribeVolumes", "StopInstances"]
    assert results[stopped.instance_id].outcome is ActionOutcome.DONE
    assert results[kept_running.instance_id].outcome is ActionOutcome.FAILED
    # the stopped instance is priced from the volumes read beside its stop; the one still
    # running keeps nothing from it
    assert provider._volumes.keys() == {stopped.instance_id}
    assert provider.stopped_cost(stopped) is not None
