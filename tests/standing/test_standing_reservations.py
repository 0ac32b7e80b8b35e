"""Capacity reservations in the cycle, on the simulated cloud's half-used reservation and
the shipped `policies/reservations.yml`: its owner is told once (what is unused, what it
costs, the on-demand twins beside it), nothing is ever done to it, and the report sums its
unused accelerator-hours and dollars over a period from the hourly listings, counting no
time costguard did not see."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from costguard.demo.sim_standing import with_twins
from costguard.model import HOURS_PER_MONTH, Instance, InstanceState, Lifecycle
from costguard.policy.load import load_policy_set
from costguard.report.run import render_report
from costguard.standing.model import Reserved, Standing, StandingKind
from costguard.standing.reservations import COVERS, prune_use, unused_in
from costguard.store.db import Database
from costguard.store.tables import (
    ActionJournalRow,
    AlertRow,
    PolicyStateRow,
    ReservationUseRow,
    StandingRow,
)
from tests.standing.sim_engine import T0, enforced, run_for, sim_engine

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = load_policy_set([ROOT / "policies" / "reservations.yml"])








def test_the_owner_is_told_once_and_nothing_is_done_to_it(tmp_path: Path) -> None:
    engine, sim, clock = sim_engine(tmp_path, instances=6, policies=enforced(SHIPPED))
    run_for(engine, clock, 60)  # unused from the first listing: due after 2 days
    with engine.db.session() as s:
        alerts = list(s.exec(select(AlertRow).where(AlertRow.policy == "unused-reservations")))
        journal = list(s.exec(select(ActionJournalRow).where(
            ActionJournalRow.policy == "unused-reservations")))
        state = s.get(PolicyStateRow, ("unused-reservations", "sim", "cr-sim-p4d-01"))
        row = s.get(StandingRow, ("sim", "cr-sim-p4d-01"))
    assert len(alerts) == 1 and [j.action for j in journal] == ["notify"]
    (alert,) = alerts
    assert alert.kind == "finding" and alert.team == "research"
    assert "2 of 4 reserved p4d.24xlarge unused now, part of it unused for 2d" in alert.subject
    assert alert.created_at >= T0 + timedelta(days=2)
    twins = sorted(i.instance_id for i in sim.fleet_now()
                   if i.instance_type == "p4d.24xlarge" and i.state is InstanceState.RUNNING
                   and i.lifecycle is Lifecycle.ON_DEMAND)
    assert row is not None and row.reservation is not None
    assert row.reservation["twins"] == twins
    beside = f"on demand beside it, could run in it: {', '.join(twins)}"
    assert (beside in alert.subject) == bool(twins)
    assert state is not None and state.state == "acted"
    assert sim.standing.calls["delete"] == sim.standing.calls["tag"] == 0


def test_dry_run_journals_and_sends_nothing(tmp_path: Path) -> None:
    engine, _, clock = sim_engine(tmp_path, instances=6, policies=SHIPPED)
    run_for(engine, clock, 50)
    with engine.db.session() as s:
        assert not list(s.exec(select(AlertRow).where(
            AlertRow.policy == "unused-reservations")))
        (notice,) = s.exec(select(ActionJournalRow).where(
            ActionJournalRow.policy == "unused-reservations"))
    assert (notice.action, notice.status) == ("notify", "dry-run")


def test_the_report_sums_unused_accelerator_hours_and_dollars(tmp_path: Path) -> None:
    engine, sim, clock = sim_engine(tmp_path, instances=6, policies=SHIPPED)
    run_for(engine, clock, 10)  # listings at T0, T0+1h ... T0+9h
    settings = engine.settings
    doc = json.loads(render_report(settings, ["team"], T0, T0 + timedelta(hours=10), None,
                                   "json", tmp_path / "r.json", now=T0 + timedelta(hours=10)))
    (line,) = doc["reservations"]
    r = sim.standing.describe(Standing.model_construct(resource_id="cr-sim-p4d-01"))
    assert r is not None and r.reservation is not None
    rate = r.reservation.unit_usd_per_hour
    assert rate is not None
    assert (line["reservation"], line["capacity"], line["used"], line["team"]) == (
        "cr-sim-p4d-01", 4, 2, "research")
    assert line["unused_instance_hours"] == pytest.approx(20)  # 2 unused x 10 h
    assert line["unused_accelerator_hours"] == pytest.approx(160)  # x 8 A100s
    assert line["unused_usd"] == pytest.approx(20 * rate, abs=0.01)
    kinds = {x["kind"]: x for x in doc["paid_not_running"]}
    assert kinds["reservation"]["usd_per_month"] == pytest.approx(
        2 * rate * HOURS_PER_MONTH, abs=0.01)
    out = tmp_path / "r.txt"
    render_report(settings, ["team"], T0, T0 + timedelta(hours=10), None, "table", out,
                  now=T0 + timedelta(hours=10))
    table = out.read_text(encoding="utf-8")
    assert "Capacity reservations, unused over 10 hours" in table
    assert "cr-sim-p4d-01 (research): p4d.24xlarge x4, 2 running, targeted\n" in table
    assert "unused: 160 accelerator-hours, $" in table and "; ends 2026-12-21" in table
    html = render_report(settings, ["team"], T0, T0 + timedelta(hours=10), None, "html",
                         tmp_path / "r.html", now=T0 + timedelta(hours=10))
    assert 'id="reservations"' in html and "cr-sim-p4d-01" in html


def _sample(s: object, at: datetime, used: int, usd: float | None = 10.0) -> None:
    from sqlmodel import Session
    assert isinstance(s, Session)
    s.add(ReservationUseRow(provider="sim", resource_id="cr-1", at=at, capacity=4, used=used,
                            accelerators=8, unit_usd_per_hour=usd, team="a"))


def test_unseen_time_is_not_counted_and_use_changes_are(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'u.db'}")
    hour = timedelta(hours=1)
    with db.session() as s:
        s.add(StandingRow(provider="sim", resource_id="cr-1", kind="reservation",
                          account="a", region="r", state="active", first_seen=T0,
                          last_seen=T0, team="a", reservation=Reserved(
                              instance_type="p4d.24xlarge", capacity=4, used=1,
                              accelerators=8).model_dump(mode="json")))
        _sample(s, T0, used=4)  # all used: nothing unused for its hour
        _sample(s, T0 + hour, used=1)  # 3 unused, then costguard was down 5 hours
        _sample(s, T0 + 6 * hour, used=2)  # 2 unused until the window's end
    with db.session() as s:
        (line,) = unused_in(s, T0, T0 + 7 * hour)
        covered = COVERS.total_seconds() / 3600
        assert line.unused_instance_hours == pytest.approx(3 * covered + 2 * 1)
        assert line.unused_accelerator_hours == pytest.approx(8 * (3 * covered + 2))
        assert line.usd == pytest.approx(10 * (3 * covered + 2))
        assert unused_in(s, T0, T0 + 7 * hour, team="b") == []
        (part,) = unused_in(s, T0 + 6 * hour, T0 + 6.5 * hour)  # a window inside a sample
        assert part.unused_instance_hours == pytest.approx(1.0)
    with db.session() as s:
        _sample(s, T0 + 6.5 * hour, used=0, usd=None)  # a sample without a price
    with db.session() as s:
        (line,) = unused_in(s, T0, T0 + 7 * hour)
        assert line.usd is None  # unpriced, never a partial sum shown as whole
    with db.session() as s:
        assert prune_use(s, T0 + 6 * hour) == 2  # the two before it, not the one at it
    with db.session() as s:
        assert [r.at for r in s.exec(select(ReservationUseRow))] == [
            T0 + 6 * hour, T0 + 6.5 * hour]


def test_twins_are_running_on_demand_instances_of_its_type_and_region() -> None:
    reserved = Reserved(instance_type="p4d.24xlarge", capacity=2, used=1)
    item = Standing(kind=StandingKind.RESERVATION, provider="sim", account="a",
                    region="us-east-1", resource_id="cr-1", state="active", in_use=False,
                    created_at=T0, observed_at=T0, reservation=reserved)

    def inst(iid: str, **kw: object) -> Instance:
        base: dict[str, object] = dict(provider="sim", account="a", region="us-east-1",
                                       instance_id=iid, instance_type="p4d.24xlarge",
                                       state=InstanceState.RUNNING, launch_time=T0,
                                       observed_at=T0)
        return Instance.model_validate(base | kw)

    fleet = [inst("i-twin"), inst("i-spot", lifecycle=Lifecycle.SPOT),
             inst("i-stopped", state=InstanceState.STOPPED), inst("i-g5", instance_type="g5"),
             inst("i-west", region="us-west-2"), inst("i-other", account="b")]
    got = with_twins(item, fleet).reservation
    assert got is not None and got.twins == ("i-twin",)
    full = item.model_copy(update={"reservation": reserved.model_copy(update={"used": 2})})
    assert with_twins(full, fleet) == full  # nothing free: no twin to name
