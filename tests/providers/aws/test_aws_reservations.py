"""Capacity reservations through the AWS provider: DescribeCapacityReservations from a fake
that follows the API reference (moto 5.2 lacks it: costguard/demo/aws_capacity.py), the
instances that could use one from moto. What is listed (active only, every page), the
unused part's price, Capacity Blocks left unpriced, twins, a reservation gone meanwhile, a
record EC2 could not have sent."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, SPOT, ProviderFactory, run_instances
from botocore.stub import Stubber

from costguard.demo.aws_capacity import ACCOUNT, reservation
from costguard.model import HOURS_PER_MONTH
from costguard.providers.aws.pricing import OnDemandTable
from costguard.providers.aws.reservations import twins
from costguard.standing.model import StandingKind

pytestmark = pytest.mark.usefixtures("moto")
Held = dict[tuple[str, str], list[dict[str, Any]]]
ONLY = frozenset({StandingKind.RESERVATION})


def test_half_used_reservation_is_priced_by_its_unused_part_and_names_its_twins(
        make_provider: ProviderFactory, capacity: Held) -> None:
    twin = run_instances(itype="p4d.24xlarge",
                         Placement={"AvailabilityZone": f"{REGION}a"})[0]["InstanceId"]
    run_instances(itype="p4d.24xlarge", Placement={"AvailabilityZone": f"{REGION}b"})
    run_instances(itype="p4d.24xlarge", Placement={"AvailabilityZone": f"{REGION}a"}, **SPOT)
    end = datetime(2026, 12, 20, tzinfo=UTC)
    capacity[(ACCOUNT, REGION)] = [
        reservation("cr-half", "p4d.24xlarge", 4, 2, end=end, match="targeted",
                    tags={"team": "research", "Name": "llm-train"}),
        reservation("cr-full", "g5.xlarge", 2, 0),
        reservation("cr-later", "p4d.24xlarge", 4, 4, state="scheduled"),
        reservation("cr-ended", "p4d.24xlarge", 4, 4, state="expired"),
        reservation("cr-block", "p5.48xlarge", 1, 1, kind="capacity-block", end=end),
    ]
    listed = make_provider().list_standing(ONLY)
    assert not listed.gaps
    by_id = {i.resource_id: i for i in listed.items}
    assert set(by_id) == {"cr-half", "cr-full", "cr-block"}  # billing ones, every page
    half = by_id["cr-half"]
    r = half.reservation
    assert r is not None
    rate = OnDemandTable().lookup(REGION, "p4d.24xlarge")
    assert rate is not None
    assert (half.kind, half.in_use, half.zone, half.name, half.tags["team"]) == (
        StandingKind.RESERVATION, False, f"{REGION}a", "llm-train", "research")
    assert (r.capacity, r.used, r.unused, r.accelerators, r.accelerator, r.match) == (
        4, 2, 2, 8, "NVIDIA A100", "targeted")
    assert r.ends_at == end
    # the on-demand p4d in its zone, not the spot one, not the other zone's
    assert r.twins == (twin,)
    assert half.usd_per_month == pytest.approx(2 * rate.usd_per_hour * HOURS_PER_MONTH)
    assert half.detail == "p4d.24xlarge x4, 2 running, targeted, until 2026-12-20"
    full = by_id["cr-full"]
    assert full.in_use and full.usd_per_month == 0 and full.reservation is not None
    assert full.reservation.twins == ()
    block = by_id["cr-block"]
    assert block.reservation is not None and block.reservation.block
    assert block.usd_per_month is None and "paid up front" in block.price_source


def test_another_platform_is_priced_at_the_linux_rate_and_says_so(
        make_provider: ProviderFactory, capacity: Held) -> None:
    capacity[(ACCOUNT, REGION)] = [reservation("cr-win", "g5.xlarge", 1, 1,
                                               platform="Windows")]
    item = make_provider().list_standing(ONLY).items[0]
    assert item.usd_per_month and item.usd_per_month > 0
    assert "Linux rate, Windows bills more" in item.price_source


def test_a_reservation_gone_or_ended_meanwhile_reads_as_none(
        make_provider: ProviderFactory, capacity: Held) -> None:
    capacity[(ACCOUNT, REGION)] = [reservation("cr-1", "g5.xlarge", 2, 1)]
    provider = make_provider()
    item = provider.list_standing(ONLY).items[0]
    assert provider.describe_standing(item) == item  # read again: the same
    capacity[(ACCOUNT, REGION)] = [reservation("cr-1", "g5.xlarge", 2, 1, state="cancelled")]
    assert provider.describe_standing(item) is None
    capacity[(ACCOUNT, REGION)] = []
    assert provider.describe_standing(item) is None  # InvalidCapacityReservationId.NotFound


def test_a_record_ec2_could_not_have_sent_is_left_out_and_logged(
        make_provider: ProviderFactory, capacity: Held,
        caplog: pytest.LogCaptureFixture) -> None:
    broken = reservation("cr-broken", "g5.xlarge", 2, 1)
    del broken["TotalInstanceCount"]
    capacity[(ACCOUNT, REGION)] = [broken, reservation("cr-ok", "g5.xlarge", 2, 1)]
    with caplog.at_level(logging.WARNING):
        listed = make_provider().list_standing(ONLY)
    assert [i.resource_id for i in listed.items] == ["cr-ok"] and not listed.gaps
    assert "capacity reservation cr-broken left out" in caplog.text


def test_instances_in_a_reservation_or_not_on_demand_are_no_twins() -> None:
    """DescribeInstances answers as botocore's model shapes them (Stubber checks the shape):
    an instance with a CapacityReservationId runs in one already; spot is not a twin."""
    ec2 = boto3.client("ec2", region_name=REGION)

    def instance(iid: str, **extra: Any) -> dict[str, Any]:
        return {"InstanceId": iid, "InstanceType": "p4d.24xlarge",
                "Placement": {"AvailabilityZone": f"{REGION}a", "Tenancy": "default"},
                "State": {"Code": 16, "Name": "running"}, **extra}

    with Stubber(ec2) as stub:
        stub.add_response("describe_instances", {"Reservations": [{"Instances": [
            instance("i-free"), instance("i-inside", CapacityReservationId="cr-other"),
            instance("i-spot", InstanceLifecycle="spot")]}]})
        found = twins(ec2, [reservation("cr-1", "p4d.24xlarge", 4, 2)])
    assert found == {(f"{REGION}a", "p4d.24xlarge", "default"): ["i-free"]}
    # nothing free: no call at all (the Stubber has no response queued)
    with Stubber(ec2):
        assert twins(ec2, [reservation("cr-1", "p4d.24xlarge", 4, 0)]) == {}
