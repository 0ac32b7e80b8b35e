"""Zonal persistent disks through the real google-cloud-compute client against the Compute
fake over HTTP (the `Disk` fields of the API reference): what is listed as used and by which
VM, since when a detached disk is unused, list prices, labels as tags; the snapshot taken
before a delete (found again, never taken twice; a failed one says so), the delete (refused
by GCE while a VM uses the disk), labels, dry runs, a disk gone meanwhile."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.model import ActionOutcome
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.disks import disk_table
from costguard.standing.model import Standing, StandingKind

Make = Callable[..., GcpProvider]
P, Z = "ml-prod", "us-central1-a"
ONLY = frozenset({StandingKind.VOLUME})
DETACHED = datetime(2026, 10, 20, 8, 30, tzinfo=UTC)


def _listed(provider: GcpProvider) -> dict[str, Standing]:
    listed = provider.list_standing(ONLY)
    assert not listed.gaps, listed.gaps
    return {i.name or "": i for i in listed.items}  # by name (a disk's id is a number)


def test_what_is_listed_as_used_by_what_and_since_when(fake: FakeGcp, make_provider: Make
                                                       ) -> None:
    fake.compute.add_instance(P, Z, "trainer")  # its boot disk `trainer`, in use
    fake.compute.add_disk(P, Z, "scratch", size_gb=500, disk_type="pd-ssd",
                          labels={"team": "vision", "costguard_protect": "true"},
                          last_detach=DETACHED)
    fake.compute.add_disk(P, Z, "odd", size_gb=10, disk_type="pd-unknown-kind")
    by_id = _listed(make_provider())
    assert set(by_id) == {"trainer", "scratch", "odd"}
    boot = by_id["trainer"]
    assert (boot.in_use, boot.used_by, boot.unused_since) == (True, ("trainer",), None)
    scratch = by_id["scratch"]
    assert (scratch.kind, scratch.in_use, scratch.used_by, scratch.size_gb) == (
        StandingKind.VOLUME, False, (), 500)
    assert scratch.unused_since == DETACHED and scratch.region == "us-central1"
    assert scratch.resource_id.isdigit() and scratch.zone == Z
    assert scratch.usd_per_month == pytest.approx(500 * disk_table().gib_month["pd-ssd"])
    assert scratch.tags == {"team": "vision", "costguard:protect": "true"}
    odd = by_id["odd"]
    assert odd.usd_per_month is None and "no price for disk type" in odd.price_source


def test_snapshot_then_delete_and_the_refusals(fake: FakeGcp, make_provider: Make) -> None:
    fake.compute.add_instance(P, Z, "trainer")
    fake.compute.add_disk(P, Z, "scratch", size_gb=100)
    provider = make_provider()
    by_id = _listed(provider)
    scratch, boot = by_id["scratch"], by_id["trainer"]
    assert provider.snapshot_volume(scratch, dry_run=True) == ("", "dry-run")
    assert fake.compute.snapshots == {}
    name, state = provider.snapshot_volume(scratch, dry_run=False)
    assert state == "completed" and name.startswith("cg-scratch-")
    again = provider.snapshot_volume(scratch, dry_run=False)  # after a crash: found again
    assert again == (name, "completed") and len(fake.compute.snapshots) == 1
    snap = fake.compute.snapshots[(P, name)]
    assert snap["labels"] == {"costguard_snapshot-of": "scratch"}
    dry = provider.delete_standing(scratch, dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and provider.describe_standing(scratch)
    done = provider.delete_standing(scratch, dry_run=False)
    assert done.outcome is ActionOutcome.DONE, done.detail
    assert provider.describe_standing(scratch) is None
    refused = provider.delete_standing(boot, dry_run=False)  # GCE: in use by a VM
    assert refused.outcome is ActionOutcome.FAILED and "trainer" in refused.detail
    assert provider.describe_standing(boot) is not None


def test_a_failed_snapshot_says_error(fake: FakeGcp, make_provider: Make) -> None:
    fake.compute.add_disk(P, Z, "scratch", size_gb=100)
    fake.compute.snapshot_error = "quota exceeded"
    provider = make_provider()
    (item,) = _listed(provider).values()
    assert provider.snapshot_volume(item, dry_run=False)[1] == "error"


def test_labels_are_set_with_the_fingerprint_just_read(fake: FakeGcp, make_provider: Make
                                                       ) -> None:
    disk = fake.compute.add_disk(P, Z, "scratch", labels={"team": "vision"})
    provider = make_provider()
    (item,) = _listed(provider).values()
    dry = provider.tag_standing(item, {"costguard:unused-since": "x"}, dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and disk.labels == {"team": "vision"}
    done = provider.tag_standing(item, {"costguard:unused-since": "x"}, dry_run=False)
    assert done.outcome is ActionOutcome.DONE, done.detail
    assert disk.labels == {"team": "vision", "costguard_unused-since": "x"}
    fake.compute.detached_disks.clear()
    gone = provider.tag_standing(item, {"a": "b"}, dry_run=False)
    assert gone.outcome is ActionOutcome.SKIPPED
    assert provider.delete_standing(item, dry_run=False).outcome is ActionOutcome.SKIPPED


def test_a_project_that_cannot_be_read_is_a_gap(fake: FakeGcp, make_provider: Make) -> None:
    fake.compute.add_disk(P, Z, "scratch")
    fake.compute.forbid_project(P)
    listed = make_provider().list_standing(ONLY)
    assert not listed.items and [g.scope for g in listed.gaps] == [P]
