"""Accrual's bulk paths: attribution from names and accounts (not only tags), instances that
went away, watermarks moved by set-based UPDATEs, and a second cycle charging only the rest."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import select

from costguard.costs.accrual import accrue
from costguard.costs.attribution import Attributor
from costguard.costs.pricing import PriceCatalog
from costguard.model import Instance
from costguard.policy.spend import Attribution
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.tables import CostIntervalRow, InstanceRow
from tests.costs.fleet import T0, instance

RULES = Attribution.model_validate({
    "dimensions": {"team": {"keys": ["team"], "case": "lower"}},
    "derive": [{"dimension": "team", "from": "name_prefix", "map": {"res-": "research"}},
               {"dimension": "team", "from": "account", "map": {"222222222222": "ads"}}],
})
M5 = 0.096  # sim m5.large list price


def named(iid: str, name: str | None, **kw: object) -> Instance:
    return instance(iid, "m5.large", **kw).model_copy(update={"name": name})  # type: ignore[arg-type]


def test_same_tags_different_names_and_accounts_attribute_apart(db: Database) -> None:
    fleet = [named("i-1", "res-train", team=None), named("i-2", "web-1", team=None),
             named("i-3", None, team=None, account="222222222222"),
             named("i-4", "res-eval", team="Vision")]
    with db.session() as s:
        record_inventory(s, "sim", fleet, T0, complete=True)
    with db.session() as s:
        accrue(s, T0 + timedelta(hours=1), PriceCatalog().price_of(), Attributor(RULES))
    with db.session() as s:
        teams = {r.instance_id: r.team for r in s.exec(select(CostIntervalRow))}
    assert teams == {"i-1": "research", "i-2": None, "i-3": "ads", "i-4": "vision"}


def test_gone_instance_is_charged_until_it_went_and_then_never_again(db: Database) -> None:
    fleet = [instance("i-1", "m5.large"), instance("i-2", "m5.large")]
    went = T0 + timedelta(minutes=30)
    with db.session() as s:
        record_inventory(s, "sim", fleet, T0, complete=True)
    with db.session() as s:
        record_inventory(s, "sim", fleet[:1], went, complete=True)  # i-2 no longer listed
    prices = PriceCatalog().price_of()
    for hours in (1, 2):
        with db.session() as s:
            accrue(s, T0 + timedelta(hours=hours), prices, Attributor())
    with db.session() as s:
        got = sorted((r.instance_id, r.start, r.end, r.cost_micros)
                     for r in s.exec(select(CostIntervalRow)))
        marks = {r.instance_id: (r.accrued_until, r.accrue_state)
                 for r in s.exec(select(InstanceRow))}
    t1, t2 = T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    assert got == [("i-1", T0, t1, round(M5 * 1e6)), ("i-1", t1, t2, round(M5 * 1e6)),
                   ("i-2", T0, went, round(M5 * 0.5 * 1e6))]
    assert marks == {"i-1": (t2, "running"), "i-2": (went, "running")}


def test_a_cycle_read_and_written_in_chunks_charges_each_instance_once(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    import costguard.costs.accrual as accrual

    monkeypatch.setattr(accrual, "_CHUNK", 2)  # 7 instances: four chunks each way
    fleet = [instance(f"i-{n}", "m5.large", team=f"t{n % 3}") for n in range(7)]
    with db.session() as s:
        record_inventory(s, "sim", fleet, T0, complete=True)
    with db.session() as s:
        stats = accrue(s, T0 + timedelta(hours=1), PriceCatalog().price_of(), Attributor())
    with db.session() as s:
        got = sorted((r.instance_id, r.team, r.cost_micros)
                     for r in s.exec(select(CostIntervalRow)))
        marks = {r.accrued_until for r in s.exec(select(InstanceRow))}
    assert got == [(f"i-{n}", f"t{n % 3}", round(M5 * 1e6)) for n in range(7)]
    assert (stats.intervals, stats.cost_micros) == (7, 7 * round(M5 * 1e6))
    assert marks == {T0 + timedelta(hours=1)}
