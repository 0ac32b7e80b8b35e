"""Accrual's rules one at a time: what an interval costs, when it is idle money, what a
stopped or unpriced instance is charged, and that the cycle's totals add up to the rows
(found by mutation testing: see MUTATION.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import null, update
from sqlmodel import select

from costguard.costs import accrual
from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.pricing import DiskPrice, PriceCatalog, PriceOverrides
from costguard.model import GpuMinute, Instance, InstanceState, PriceQuote
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.refs import InstanceRef
from costguard.store.tables import CostIntervalRow, InstanceRow
from tests.costs.fleet import T0, idle_minutes, instance

M5, G5 = 0.096, 1.006  # sim list prices (the shipped AWS table, us-east-1)
HOUR = timedelta(hours=1)


def seed(db: Database, fleet: list[Instance], at: datetime = T0) -> None:
    with db.session() as s:
        record_inventory(s, "sim", fleet, at, complete=True)


def rows(db: Database) -> dict[str, CostIntervalRow]:
    with db.session() as s:
        got = {r.instance_id: r for r in s.exec(select(CostIntervalRow))}
        for r in got.values():
            s.expunge(r)
    return got


def readings(by_instance: dict[str, list[GpuMinute]]):  # type: ignore[no-untyped-def]
    def minutes_of(ref: InstanceRef, start: datetime, end: datetime) -> list[GpuMinute]:
        return [m for m in by_instance.get(ref[1], []) if start <= m.minute < end]
    return minutes_of


def busy_minutes(iid: str, start: datetime, end: datetime, gpus: int) -> list[GpuMinute]:
    return [m.model_copy(update={"sm_mean": 60.0, "util_mean": 80.0})
            for m in idle_minutes("sim", iid, start, end, gpus)]


def test_an_interval_costs_its_rate_for_its_seconds_in_micro_dollars(db: Database) -> None:
    seed(db, [instance("i-1", "m5.large")])
    with db.session() as s:
        stats = accrue(s, T0 + timedelta(minutes=20), PriceCatalog().price_of(), Attributor())
    r = rows(db)["i-1"]
    assert (r.start, r.end, r.usd_per_hour) == (T0, T0 + timedelta(minutes=20), M5)
    assert r.cost_micros == round(M5 / 3 * 1e6) == 32_000
    assert (r.state, r.verdict, r.gpu_count, r.gpu_seconds) == ("running", "no-data", 0, 0)
    assert (stats.intervals, stats.cost_micros, stats.idle_cost_micros) == (1, 32_000, 0)


def test_idle_money_is_the_whole_interval_when_the_verdict_is_idle(db: Database) -> None:
    seed(db, [instance("i-idle", "g5.xlarge", gpus=1), instance("i-busy", "g5.xlarge", gpus=1)])
    end = T0 + HOUR
    minutes = readings({"i-idle": idle_minutes("sim", "i-idle", T0, end, 1),
                        "i-busy": busy_minutes("i-busy", T0, end, 1)})
    with db.session() as s:
        stats = accrue(s, end, PriceCatalog().price_of(), Attributor(), minutes_of=minutes)
    got = rows(db)
    idle, busy = got["i-idle"], got["i-busy"]
    cost = round(G5 * 1e6)
    assert (idle.verdict, idle.cost_micros, idle.idle_cost_micros) == ("idle", cost, cost)
    assert (idle.gpu_seconds, idle.idle_gpu_seconds) == (3600, 3600)
    assert (busy.verdict, busy.idle_cost_micros, busy.idle_gpu_seconds) == ("active", 0, 0)
    assert (stats.cost_micros, stats.idle_cost_micros) == (2 * cost, cost)


def test_no_readings_is_no_data_not_idle(db: Database) -> None:
    seed(db, [instance("i-1", "g5.xlarge", gpus=4)])
    with db.session() as s:
        stats = accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor(),
                       minutes_of=readings({}))
    r = rows(db)["i-1"]
    assert (r.verdict, r.idle_cost_micros, r.gpu_seconds, r.idle_gpu_seconds) == (
        "no-data", 0, 4 * 3600, 0)
    assert stats.idle_cost_micros == 0


def test_the_idle_threshold_and_signal_are_the_callers(db: Database) -> None:
    seed(db, [instance("i-1", "g5.xlarge", gpus=1)])
    ten = [m.model_copy(update={"sm_mean": 10.0, "util_mean": 10.0})
           for m in idle_minutes("sim", "i-1", T0, T0 + HOUR, 1)]
    with db.session() as s:
        accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor(),
               minutes_of=readings({"i-1": ten}), idle_below=20.0, idle_signal="util_gpu")
    assert rows(db)["i-1"].verdict == "idle"


def test_stored_readings_are_used_when_no_lookup_is_given(db: Database) -> None:
    from costguard.store.readings import write_minutes

    seed(db, [instance("i-1", "g5.xlarge", gpus=1)])
    with db.session() as s:
        write_minutes(s, idle_minutes("sim", "i-1", T0, T0 + HOUR, 1))
    with db.session() as s:
        accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor())
    assert rows(db)["i-1"].verdict == "idle"


def test_an_unpriced_type_is_charged_nothing_and_named(db: Database) -> None:
    seed(db, [instance("i-1", "zz9.plural", gpus=1)])
    with db.session() as s:
        stats = accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor())
    r = rows(db)["i-1"]
    assert (r.cost_micros, r.usd_per_hour, r.price_source) == (0, 0.0, "no price known")
    assert stats.unpriced == {"sim:zz9.plural"}
    seed(db, [instance("i-2", "m5.large")], at=T0 + HOUR)
    with db.session() as s:  # a provider without any lookup: the same
        stats = accrue(s, T0 + 2 * HOUR, {}, Attributor())
    assert "sim:m5.large" in stats.unpriced


def test_a_stopped_instance_costs_its_disks_and_the_cycle_total_says_so(db: Database) -> None:
    stopped = instance("i-1", "p4d.24xlarge", gpus=8, state=InstanceState.STOPPED)
    seed(db, [stopped])
    cat = PriceCatalog(overrides=PriceOverrides(disks=(
        DiskPrice(provider="sim", instance_type="p4d.24xlarge", usd_per_hour=0.5),)))
    with db.session() as s:
        stats = accrue(s, T0 + 2 * HOUR, cat.price_of(), Attributor(), disk_price_of=cat.disk)
    r = rows(db)["i-1"]
    assert (r.state, r.cost_micros, r.usd_per_hour, r.verdict) == ("stopped", 1_000_000, 0.5,
                                                                   "no-data")
    assert (r.gpu_count, r.gpu_seconds, r.idle_gpu_seconds, r.idle_cost_micros) == (8, 0, 0, 0)
    assert (stats.intervals, stats.cost_micros, stats.idle_cost_micros) == (1, 1_000_000, 0)


def test_a_stopped_instance_without_a_disk_price_is_not_charged(db: Database) -> None:
    seed(db, [instance("i-1", "m5.large", state=InstanceState.STOPPED)])
    cat = PriceCatalog()
    with db.session() as s:
        stats = accrue(s, T0 + HOUR, cat.price_of(), Attributor(), disk_price_of=cat.disk)
    assert rows(db) == {} and (stats.intervals, stats.cost_micros) == (0, 0)
    with db.session() as s:  # no disk lookup at all
        stats = accrue(s, T0 + 2 * HOUR, cat.price_of(), Attributor())
    assert rows(db) == {} and stats.intervals == 0
    with db.session() as s:
        marks = {r.instance_id: r.accrued_until for r in s.exec(select(InstanceRow))}
    assert marks == {"i-1": T0 + 2 * HOUR}


def test_nothing_due_moves_nothing(db: Database) -> None:
    seed(db, [instance("i-1", "m5.large")], at=T0 + HOUR)
    with db.session() as s:
        stats = accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor())
    assert (stats.intervals, stats.cost_micros) == (0, 0)
    with db.session() as s:
        row = s.exec(select(InstanceRow)).one()
    assert row.accrued_until == T0 + HOUR


def test_a_state_change_is_charged_from_the_poll_that_saw_it(db: Database) -> None:
    seed(db, [instance("i-1", "m5.large")])
    cat = PriceCatalog(overrides=PriceOverrides(disks=(
        DiskPrice(provider="sim", instance_type="m5.large", usd_per_hour=0.01),)))
    seed(db, [instance("i-1", "m5.large", state=InstanceState.STOPPED)], at=T0 + HOUR)
    for hours in (1, 2):  # the cycle: inventory, then accrual
        with db.session() as s:
            accrue(s, T0 + hours * HOUR, cat.price_of(), Attributor(), disk_price_of=cat.disk)
    with db.session() as s:
        got = sorted((r.start, r.state, r.cost_micros) for r in s.exec(select(CostIntervalRow)))
        mark = s.exec(select(InstanceRow)).one()
    assert got == [(T0, "running", round(M5 * 1e6)), (T0 + HOUR, "stopped", 10_000)]
    assert (mark.accrued_until, mark.accrue_state) == (T0 + 2 * HOUR, "stopped")


def test_a_custom_lookup_is_asked_per_instance_and_its_source_kept(db: Database) -> None:
    asked: list[str] = []

    def lookup(inst: Instance) -> PriceQuote | None:
        asked.append(inst.instance_id)
        if inst.instance_id == "i-2":
            return None
        return PriceQuote(usd_per_hour=2.0, source="contract " + "x" * 200)

    seed(db, [instance("i-1", "m5.large"), instance("i-2", "m5.large")])
    with db.session() as s:
        stats = accrue(s, T0 + HOUR, {"sim": lookup}, Attributor())
    got = rows(db)
    assert sorted(asked) == ["i-1", "i-2"]
    assert got["i-1"].cost_micros == 2_000_000
    assert got["i-1"].price_source == ("contract " + "x" * 200)[:128]
    assert got["i-2"].cost_micros == 0 and stats.unpriced == {"sim:m5.large"}


def test_rates_are_looked_up_once_per_price_key(db: Database) -> None:
    calls: list[str] = []

    class Counting(PriceCatalog):
        def quote(self, inst: Instance) -> PriceQuote | None:
            calls.append(inst.instance_id)
            return super().quote(inst)

    counting = Counting()
    seed(db, [instance(f"i-{n}", "m5.large") for n in range(5)])
    with db.session() as s:
        accrue(s, T0 + HOUR, {"sim": counting.quote}, Attributor())
    assert len(calls) == 1
    assert {r.cost_micros for r in rows(db).values()} == {round(M5 * 1e6)}


def test_every_interval_carries_its_attribution(db: Database) -> None:
    seed(db, [instance("i-1", "m5.large", team="Vision"), instance("i-2", "m5.large")])
    with db.session() as s:
        accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor())
    got = rows(db)
    assert got["i-1"].team == "Vision" and got["i-2"].team is None
    assert (got["i-1"].account, got["i-1"].region, got["i-1"].instance_type,
            got["i-1"].lifecycle) == ("111111111111", "us-east-1", "m5.large", "on-demand")


def test_the_default_idle_threshold_is_five_percent(db: Database) -> None:
    seed(db, [instance("i-1", "g5.xlarge", gpus=1)])
    just_over = [m.model_copy(update={"sm_mean": 5.5, "util_mean": 5.5})
                 for m in idle_minutes("sim", "i-1", T0, T0 + HOUR, 1)]
    with db.session() as s:
        accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor(),
               minutes_of=readings({"i-1": just_over}))
    assert rows(db)["i-1"].verdict != "idle"


def test_the_idle_signal_is_passed_to_the_classifier(db: Database) -> None:
    seed(db, [instance("i-1", "g5.xlarge", gpus=1)])
    tiny_kernels = [m.model_copy(update={"sm_mean": 0.0, "util_mean": 40.0})
                    for m in idle_minutes("sim", "i-1", T0, T0 + HOUR, 1)]
    with db.session() as s:
        accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor(),
               minutes_of=readings({"i-1": tiny_kernels}), idle_signal="util_gpu")
    assert rows(db)["i-1"].verdict == "active"


def test_attribution_reads_the_launcher_and_the_owning_groups_tags(db: Database) -> None:
    from costguard.model import Owner, OwnerKind
    from costguard.policy.spend import Attribution

    rules = Attribution.model_validate({
        "dimensions": {"team": {"keys": ["team"]}},
        "derive": [{"dimension": "team", "from": "launcher",
                    "map": {"arn:aws:iam::1:instance-profile/vision-*": "vision"}}]})
    group = Owner(kind=OwnerKind.ASG, name="trainers", tags={"team": "research"})
    fleet = [instance("i-1", "m5.large").model_copy(update={"owner": group}),
             instance("i-2", "m5.large").model_copy(
                 update={"launched_by": "arn:aws:iam::1:instance-profile/vision-train"}),
             instance("i-3", "m5.large")]
    seed(db, fleet)
    with db.session() as s:
        accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor(rules))
    assert {iid: r.team for iid, r in rows(db).items()} == {
        "i-1": "research", "i-2": "vision", "i-3": None}


def test_instances_gone_at_different_times_are_each_charged_until_they_went(
        db: Database) -> None:
    fleet = [instance(f"i-{n}", "m5.large") for n in range(3)]
    seed(db, fleet)
    seed(db, fleet[1:], at=T0 + timedelta(minutes=15))  # i-0 went
    seed(db, fleet[2:], at=T0 + timedelta(minutes=30))  # i-1 went
    with db.session() as s:
        stats = accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor())
    got = {iid: r.end for iid, r in rows(db).items()}
    assert got == {"i-0": T0 + timedelta(minutes=15), "i-1": T0 + timedelta(minutes=30),
                   "i-2": T0 + HOUR}
    assert stats.cost_micros == sum(r.cost_micros for r in rows(db).values())


def test_the_cycle_total_adds_every_stopped_instances_disks(db: Database) -> None:
    fleet = [instance(f"i-{n}", "m5.large", state=InstanceState.STOPPED) for n in range(3)]
    seed(db, fleet)
    cat = PriceCatalog(overrides=PriceOverrides(disks=(
        DiskPrice(provider="sim", instance_type="m5.large", usd_per_hour=0.25),)))
    with db.session() as s:
        stats = accrue(s, T0 + HOUR, cat.price_of(), Attributor(), disk_price_of=cat.disk)
    assert (stats.intervals, stats.cost_micros) == (3, 750_000)


def test_rows_held_in_the_session_see_the_moved_watermark(db: Database) -> None:
    seed(db, [instance("i-1", "m5.large")])
    with db.session() as s:
        held = s.exec(select(InstanceRow)).one()
        assert held.accrued_until == T0
        accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor())
        assert held.accrued_until == T0 + HOUR


def test_an_instance_stopped_when_it_went_is_not_charged_running_while_away(
    db: Database,
) -> None:
    g5 = instance("i-1", "g5.xlarge", gpus=1)
    cat = PriceCatalog()
    seed(db, [g5])
    with db.session() as s:
        accrue(s, T0 + HOUR, cat.price_of(), Attributor())
        record_inventory(s, "sim", [g5.model_copy(update={"state": InstanceState.STOPPED})],
                         T0 + 2 * HOUR, complete=True)
        record_inventory(s, "sim", [], T0 + 3 * HOUR, complete=True)  # gone
        accrue(s, T0 + 4 * HOUR, cat.price_of(), Attributor())  # charged up to when it went
        record_inventory(s, "sim", [g5], T0 + 5 * HOUR, complete=True)  # back, running
        accrue(s, T0 + 6 * HOUR, cat.price_of(), Attributor())
        charged = [(r.start, r.end, r.state) for r in s.exec(
            select(CostIntervalRow).order_by(CostIntervalRow.start))]
    # away from 3 h on in the state it went in (stopped, no disk price: not charged); the
    # poll at 6 h sees it running and charges running from there
    assert charged == [(T0, T0 + HOUR, "running"), (T0 + HOUR, T0 + 3 * HOUR, "running")]
    with db.session() as s:
        row = s.get(InstanceRow, ("sim", "i-1"))
        assert row is not None
        assert (row.accrued_until, row.accrue_state) == (T0 + 6 * HOUR, "running")


def test_a_row_from_before_owners_were_stored_is_attributed_from_its_tags(
    db: Database,
) -> None:
    seed(db, [instance("i-1", "m5.large", team="Vision")])
    with db.session() as s:  # rows older than migration 0007 hold SQL NULL, not JSON null
        s.execute(update(InstanceRow).values(owner=null()))
        s.commit()
        accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor())
    assert rows(db)["i-1"].team == "Vision"


def test_an_interval_column_that_needs_binding_is_refused_by_name_on_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the SQLite fast path hands tuples to the driver as they are: a column whose type binds
    # (a DATETIME does) and is not bound ahead (`_PREBOUND`) would be written wrong
    monkeypatch.setattr(accrual, "_PREBOUND", ("verdict", "end", "usd_per_hour"))
    db = Database(f"sqlite:///{tmp_path / 'fast.db'}")
    try:
        seed(db, [instance("i-1", "m5.large")])
        with db.session() as s, pytest.raises(RuntimeError) as refused:
            accrue(s, T0 + HOUR, PriceCatalog().price_of(), Attributor())
    finally:
        db.dispose()
    assert str(refused.value) == (
        "cost_intervals columns ['start'] need binding before the driver sees them")


def test_a_known_instance_is_priced_as_given_and_an_unknown_one_as_stored(
        db: Database) -> None:
    """The engine hands accrual its inventory: a price lookup gets that Instance (no read of
    the row); an instance the mapping lacks (gone since, say) is read from the store."""
    seen: dict[str, Instance] = {}

    def lookup(inst: Instance) -> PriceQuote | None:
        seen[inst.instance_id] = inst
        return PriceQuote(usd_per_hour=1.0, source="list")

    fleet = [instance("i-1", "m5.large"), instance("i-2", "m5.large")]
    seed(db, fleet)
    given = fleet[0].model_copy(update={"name": "as the engine holds it"})
    with db.session() as s:
        accrue(s, T0 + HOUR, {"sim": lookup}, Attributor(),
               instances={("sim", "i-1"): given})
    assert seen["i-1"] is given
    assert seen["i-2"] == fleet[1]
    assert {r.cost_micros for r in rows(db).values()} == {1_000_000}
