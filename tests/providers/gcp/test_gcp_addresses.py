"""Compute Engine static external addresses through the real client against the Compute
fake over HTTP (the `Address` fields of the API reference): what is listed (external only)
and what holds each; release (refused by GCE while held) and labels through region
operations; dry runs; and, through the engine, an address held by nothing released after
its warning and grace while one held by a running VM is left alone."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from sqlmodel import select

from costguard.clock import ManualClock
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.model import ActionOutcome
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.addresses import UNPRICED
from costguard.standing.model import Standing, StandingKind
from costguard.store.tables import ActionJournalRow, StandingRow
from tests.fakes.gcp_engine import gcp_engine_over

Make = Callable[..., GcpProvider]
P, R, Z = "ml-prod", "us-central1", "us-central1-a"
ONLY = frozenset({StandingKind.ADDRESS})


def _listed(provider: GcpProvider) -> dict[str, Standing]:
    listed = provider.list_standing(ONLY)
    assert not listed.gaps, listed.gaps
    return {i.name or "": i for i in listed.items}


def test_listed_held_released_and_labelled(fake: FakeGcp, make_provider: Make) -> None:
    c = fake.compute
    c.add_instance(P, Z, "web")
    c.add_address(P, R, "idle-ip", "203.0.113.7", labels={"team": "vision"})
    c.add_address(P, R, "web-ip", "203.0.113.8", users=[f"zones/{Z}/instances/web"])
    c.add_address(P, R, "lb-ip", "203.0.113.9", users=[f"regions/{R}/forwardingRules/fr"])
    c.add_address(P, R, "private", "10.0.0.5", address_type="INTERNAL")
    provider = make_provider()
    by_name = _listed(provider)
    assert set(by_name) == {"idle-ip", "web-ip", "lb-ip"}  # an internal one does not bill
    idle, web, lb = by_name["idle-ip"], by_name["web-ip"], by_name["lb-ip"]
    assert (idle.kind, idle.in_use, idle.used_by, idle.detail, idle.region) == (
        StandingKind.ADDRESS, False, (), "203.0.113.7", R)
    assert idle.usd_per_month is None and idle.price_source == UNPRICED
    assert idle.tags == {"team": "vision"} and idle.resource_id.isdigit()
    assert web.used_by == (f"{Z}/web",) and lb.used_by == ("forwardingRules/fr",)
    dry = provider.tag_standing(idle, {"costguard:unused-since": "x"}, dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN
    done = provider.tag_standing(idle, {"costguard:unused-since": "x"}, dry_run=False)
    assert done.outcome is ActionOutcome.DONE, done.detail
    fresh = provider.describe_standing(idle)
    assert fresh is not None and fresh.tags["costguard:unused-since"] == "x"
    assert provider.delete_standing(idle, dry_run=True).outcome is ActionOutcome.DRY_RUN
    released = provider.delete_standing(idle, dry_run=False)
    assert released.outcome is ActionOutcome.DONE, released.detail
    assert provider.describe_standing(idle) is None and c.address(P, R, "idle-ip") is None
    refused = provider.delete_standing(web, dry_run=False)
    assert refused.outcome is ActionOutcome.FAILED and "web" in refused.detail
    assert provider.delete_standing(idle, dry_run=False).outcome is ActionOutcome.SKIPPED


POLICY = """\
policies:
  - name: idle-addresses
    resource: address
    mode: enforce
    condition: {unused: {for: 2h}}
    actions: [notify, {delete: {grace: 1h}}]
"""


def test_the_engine_releases_an_idle_address_and_keeps_a_held_one(
        fake: FakeGcp, clock: ManualClock, tmp_path: Path) -> None:
    c = fake.compute
    c.add_instance(P, Z, "web")
    c.add_instance(P, Z, "parked", status="TERMINATED")
    c.add_address(P, R, "idle-ip", "203.0.113.7")
    c.add_address(P, R, "web-ip", "203.0.113.8", users=[f"zones/{Z}/instances/web"])
    c.add_address(P, R, "parked-ip", "203.0.113.9", users=[f"zones/{Z}/instances/parked"])
    with gcp_engine_over(fake, tmp_path, POLICY, clock) as engine:
        for _ in range(6):
            engine.run_cycle()
            clock.advance(timedelta(hours=1))
        assert c.address(P, R, "idle-ip") is None
        assert c.address(P, R, "web-ip") is not None
        assert c.address(P, R, "parked-ip") is not None  # held by a stopped VM: reported
        with engine.db.session() as s:
            rows = {r.name: r for r in s.exec(select(StandingRow))}
            deletes = [j.instance_id for j in s.exec(select(ActionJournalRow).where(
                ActionJournalRow.action == "delete", ActionJournalRow.status == "done"))]
        assert deletes == [rows["idle-ip"].resource_id]
        assert not rows["parked-ip"].in_use and rows["parked-ip"].used_by == [f"{Z}/parked"]
        assert rows["web-ip"].in_use
