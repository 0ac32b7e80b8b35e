"""Compute Engine reservations through the real google-cloud-compute client against the
local fake (over HTTP, shapes from the API reference's `Reservation`): what is listed (READY
only, every page), capacity and use, accelerators from guestAccelerators and from the
machine type, the unused part's price, twins by reservation affinity, a project that cannot
be read, a reservation gone meanwhile, one whose shape is not given."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.model import HOURS_PER_MONTH
from costguard.providers.gcp import GcpProvider
from costguard.standing.model import Standing, StandingKind

ONLY = frozenset({StandingKind.RESERVATION})
Make = Callable[..., GcpProvider]
ZONE = "us-central1-a"


def _by_id(provider: GcpProvider) -> dict[str, Standing]:
    listed = provider.list_standing(ONLY)
    assert not listed.gaps, listed.gaps
    return {f"{i.zone}/{i.name}": i for i in listed.items}  # its id is a number


def test_a_half_used_reservation_its_price_and_its_twins(fake: FakeGcp,
                                                         make_provider: Make) -> None:
    c = fake.compute
    end = datetime(2026, 12, 20, tzinfo=UTC)
    c.add_reservation("ml-prod", ZONE, "a100-pool", "a2-highgpu-1g", 4, in_use=1,
                      specific_required=True, delete_at=end)
    c.add_reservation("ml-prod", ZONE, "t4-pool", "n1-standard-8", 2, in_use=2,
                      accelerators=[("nvidia-tesla-t4", 1)])
    c.add_reservation("ml-prod", ZONE, "not-yet", "a2-highgpu-1g", 2, status="CREATING")
    for i in range(3):  # a page of two, then one
        c.add_reservation("ml-prod", "us-central1-b", f"spare-{i}", "g2-standard-4", 1)
    c.add_instance("ml-prod", ZONE, "outside", "a2-highgpu-1g")  # ANY, none open: a twin
    named = c.add_instance("ml-prod", ZONE, "inside", "a2-highgpu-1g")
    named.reservation_affinity, named.reservation_names = "SPECIFIC_RESERVATION", (
        "a100-pool",)
    c.add_instance("ml-prod", ZONE, "spot", "a2-highgpu-1g", spot=True)
    c.add_instance("ml-prod", ZONE, "stopped", "a2-highgpu-1g", status="TERMINATED")
    c.add_instance("ml-prod", "us-central1-b", "opted-out", "g2-standard-4"
                   ).reservation_affinity = "NO_RESERVATION"
    c.add_instance("ml-prod", "us-central1-b", "any", "g2-standard-4")  # open ones exist
    by_id = _by_id(make_provider(page_size=2))
    assert set(by_id) == {f"{ZONE}/a100-pool", f"{ZONE}/t4-pool",
                          *(f"us-central1-b/spare-{i}" for i in range(3))}
    a100 = by_id[f"{ZONE}/a100-pool"]
    r = a100.reservation
    assert r is not None
    assert a100.kind is StandingKind.RESERVATION and not a100.in_use
    assert (r.capacity, r.used, r.unused, r.accelerators, r.match, r.ends_at) == (
        4, 1, 3, 1, "targeted", end)
    assert r.accelerator and "A100" in r.accelerator
    assert r.twins == ("outside",)
    assert r.unit_usd_per_hour and a100.usd_per_month == pytest.approx(
        3 * r.unit_usd_per_hour * HOURS_PER_MONTH)
    t4 = by_id[f"{ZONE}/t4-pool"]
    assert t4.in_use and t4.reservation is not None and t4.reservation.accelerators == 1
    assert t4.reservation.twins == ()
    spare = by_id["us-central1-b/spare-0"].reservation
    assert spare is not None
    assert spare.match == "open" and spare.twins == ("opted-out",)
    assert spare.accelerators == 1  # a g2-standard-4's built-in L4


def test_a_commitment_is_said_and_an_unreadable_one_left_out(
        fake: FakeGcp, make_provider: Make, caplog: pytest.LogCaptureFixture) -> None:
    c = fake.compute
    c.add_reservation("ml-prod", ZONE, "committed", "a2-highgpu-1g", 2, commitment="c-1")
    c.add_reservation("ml-prod", ZONE, "template-only", "", 2)  # no machine type given
    with caplog.at_level(logging.WARNING):
        by_id = _by_id(make_provider())
    assert list(by_id) == [f"{ZONE}/committed"]
    assert "a commitment discounts it" in by_id[f"{ZONE}/committed"].price_source
    assert "reservation template-only left out" in caplog.text


def test_a_project_that_cannot_be_read_is_a_gap(fake: FakeGcp, make_provider: Make) -> None:
    fake.compute.add_reservation("ml-prod", ZONE, "r", "a2-highgpu-1g", 2)
    fake.compute.forbid_project("ml-prod")
    listed = make_provider().list_standing(ONLY)
    assert not listed.items and [g.scope for g in listed.gaps] == ["ml-prod"]


def test_describe_reads_one_again_and_says_when_it_is_gone(fake: FakeGcp,
                                                           make_provider: Make) -> None:
    fake.compute.add_reservation("ml-prod", ZONE, "r", "a2-highgpu-1g", 2, in_use=1)
    provider = make_provider()
    (item,) = provider.list_standing(ONLY).items
    fake.compute.reservation("ml-prod", ZONE, "r").in_use = 2
    fresh = provider.describe_standing(item)
    assert fresh is not None and fresh.in_use and fresh.reservation is not None
    fake.compute.remove_reservation("ml-prod", ZONE, "r")
    assert provider.describe_standing(item) is None


def test_nothing_free_means_no_instance_listing(fake: FakeGcp, make_provider: Make) -> None:
    fake.compute.add_reservation("ml-prod", ZONE, "full", "a2-highgpu-1g", 2, in_use=2)
    _by_id(make_provider())
    assert fake.compute.calls["GET aggregated_list"] == 0
