"""Accrual and report totals against hand-computed cents, on SQLite and PostgreSQL.

Fleet (sim list prices = the shipped AWS table, us-east-1): A p4d.24xlarge on-demand
(21.957642/h, 20% negotiated p4d discount -> 17.566114/h, team research), B g5.xlarge spot
(1.006 x 35% = 0.3521/h, team vision, idle the whole time), C m5.large untagged (0.096/h).
Polls at T0, T0+7m30s (a partial interval), and T0+2h real time, which is 03:00 EDT on the
night DST starts (3 h of wall clock). A is seen stopped at that poll and then costs only
its disks (0.05/h).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlmodel import Session, select

from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.pricing import CustomPrice, Discount, DiskPrice, PriceCatalog, PriceOverrides
from costguard.costs.rollup import prune, rollup
from costguard.model import InstanceState
from costguard.report.queries import catalog_spot_price, spend
from costguard.report.render import display_rows
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.rollup_tables import CostDailyRow
from costguard.store.tables import CostIntervalRow
from tests.costs.fleet import T0, idle_minutes, instance

NY = ZoneInfo("America/New_York")
T1 = T0 + timedelta(minutes=7, seconds=30)
T2 = datetime(2026, 3, 8, 3, 0, tzinfo=NY)  # 07:00 UTC: two real hours after T0
T3 = T2 + timedelta(hours=1)
DAY = datetime(2026, 3, 8, tzinfo=ZoneInfo("UTC"))

A_RATE, B_RATE, C_RATE, DISK = 17.566114, 0.3521, 0.096, 0.05
A_COST = round(A_RATE * 0.125 * 1e6) + round(A_RATE * 1.875 * 1e6) + round(DISK * 1e6)
B_COST = 3 * round(B_RATE * 1e6)  # (7.5 + 112.5 + 60 minutes, summed exactly below)
C_COST = round(C_RATE * 0.125 * 1e6) + round(C_RATE * 1.875 * 1e6) + round(C_RATE * 1e6)


def catalog() -> PriceCatalog:
    return PriceCatalog(overrides=PriceOverrides(
        discounts=(Discount(provider="sim", family="p4d", percent=20),),
        disks=(DiskPrice(provider="sim", instance_type="p4d.24xlarge", usd_per_hour=DISK),),
    ))


def run_fleet(db: Database) -> None:
    cat = catalog()
    fleet = [instance("i-a", "p4d.24xlarge", team="research", gpus=8),
             instance("i-b", "g5.xlarge", team="vision", gpus=1, spot=True),
             instance("i-c", "m5.large")]
    b_idle = idle_minutes("sim", "i-b", T0, T3, 1)

    def minutes_of(ref: tuple[str, str], start: datetime, end: datetime) -> list:  # type: ignore[type-arg]
        return [m for m in b_idle if start <= m.minute < end] if ref[1] == "i-b" else []

    def cycle(now: datetime) -> None:
        with db.session() as s:
            accrue(s, now, cat.price_of(), Attributor(), minutes_of=minutes_of,
                   disk_price_of=cat.disk)

    with db.session() as s:
        record_inventory(s, "sim", fleet, T0, complete=True)
    cycle(T1)
    with db.session() as s:  # as the engine does: collect, then accrue at the same poll
        stopped = [fleet[0].model_copy(update={"state": InstanceState.STOPPED}), *fleet[1:]]
        record_inventory(s, "sim", stopped, T2, complete=True)
    cycle(T2)
    cycle(T3)


def exact_b_cost() -> int:
    return sum(round(B_RATE * h * 1e6) for h in (0.125, 1.875, 1.0))


def test_accrual_charges_partial_hours_state_changes_spot_discounts_and_dst(db: Database) -> None:
    run_fleet(db)
    with db.session() as s:
        rows = s.exec(select(CostIntervalRow)).all()
        by_id: dict[str, int] = {}
        for r in rows:
            by_id[r.instance_id] = by_id.get(r.instance_id, 0) + r.cost_micros
        a_states = sorted((r.start, r.state) for r in rows if r.instance_id == "i-a")
    assert by_id == {"i-a": A_COST, "i-b": exact_b_cost(), "i-c": C_COST}
    assert [st for _, st in a_states] == ["running", "running", "stopped"]
    # across the DST change the second interval is 1 h 52 m 30 s of real time, not 2 h 52 m
    with db.session() as s:
        a2 = s.exec(select(CostIntervalRow).where(CostIntervalRow.instance_id == "i-a",
                                                  CostIntervalRow.start == T1)).one()
    assert a2.end - a2.start == timedelta(hours=1, minutes=52, seconds=30)
    assert a2.gpu_seconds == 8 * 6750


def report_of(s: Session, by: list[str]) -> tuple[dict[tuple[str, ...], int], int, int, int]:
    rep = spend(s, by, DAY, DAY + timedelta(days=1), spot_price=catalog_spot_price(catalog()))
    rows, total = display_rows(rep)
    return ({r.key: r.cost for r in rows}, total.cost, rep.total.idle_cost_micros,
            rep.total.savings_micros)


def test_report_totals_match_hand_computed_cents_from_raw_and_rollups(db: Database) -> None:
    run_fleet(db)
    total_micros = A_COST + exact_b_cost() + C_COST
    expected_total_cents = (total_micros + 5_000) // 10_000
    # savings: A's on-demand hours at the discounted sim spot price 21.957642 x 0.35 x 0.8
    a_running = A_COST - round(DISK * 1e6)
    spot_rate = round(21.957642 * 0.35, 4) * 0.8
    savings = a_running - round(spot_rate * 2 * 1e6)
    with db.session() as s:
        raw = report_of(s, ["team"])
    cents, total_cents, idle, got_savings = raw
    assert total_cents == expected_total_cents
    assert sum(cents.values()) == total_cents
    assert set(cents) == {("research",), ("vision",), ("unattributed",)}
    assert idle == exact_b_cost()  # B was idle all along; nothing else was
    assert abs(got_savings - savings) <= 1
    with db.session() as s:
        assert rollup(s, DAY + timedelta(days=1)) > 0
    with db.session() as s:
        assert report_of(s, ["team"]) == raw
        assert s.exec(select(CostDailyRow)).first() is not None
    with db.session() as s:
        raw_rows = len(s.exec(select(CostIntervalRow)).all())
        assert prune(s, DAY + timedelta(days=30)) == raw_rows == 9
    with db.session() as s:
        assert report_of(s, ["team"]) == raw  # from daily rows alone
        by_type = spend(s, ["instance-type"], DAY, DAY + timedelta(days=1))
    assert {r.key[0]: r.instances for r in by_type.rows} == {
        "p4d.24xlarge": 1, "g5.xlarge": 1, "m5.large": 1}


def test_custom_price_replaces_the_list_price_before_discounts() -> None:
    cat = PriceCatalog(overrides=PriceOverrides(
        prices=(CustomPrice(provider="sim", instance_type="p4d.24xlarge", usd_per_hour=20.0,
                            note="private pricing"),),
        discounts=(Discount(provider="sim", percent=10),
                   Discount(provider="sim", family="g5", percent=30)),
    ))
    p4d = cat.quote(instance("x", "p4d.24xlarge", gpus=8))
    g5 = cat.quote(instance("y", "g5.xlarge", gpus=1))
    m5 = cat.quote(instance("z", "m5.large"))
    assert p4d is not None and p4d.usd_per_hour == 20.0 and p4d.source == "private pricing"
    assert g5 is not None and g5.usd_per_hour == pytest.approx(1.006 * 0.7)  # most specific
    assert m5 is not None and m5.usd_per_hour == pytest.approx(0.096 * 0.9)
    assert "10% off" in m5.source
