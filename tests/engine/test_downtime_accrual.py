"""The cycle after a downtime charges the downtime with its readings, read from the store a
batch at a time: the reading window holds only the span the idle policies look back on."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.store.db import Database
from costguard.store.tables import CostIntervalRow
from tests.engine.conftest import EngineFactory
from tests.fakes.cloud import BUSY, IDLE, ScriptedCloud, until


def test_a_downtime_is_charged_with_its_readings_and_not_held_in_the_window(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cloud.add("i-idle", IDLE)
    cloud.add("i-busy", BUSY, gpus=2)
    down_since = clock.now() + timedelta(minutes=5)
    # busy for the first hour of the downtime only: the window's last 45 minutes alone
    # would call the downtime idle
    cloud.add("i-woke", until(down_since + timedelta(hours=1), "busy", "no_process"))
    engine = make_engine(mode="dry-run")
    engine.run_cycle()
    clock.advance(timedelta(minutes=5))
    engine.run_cycle()
    assert clock.now() == down_since
    clock.advance(timedelta(hours=3))  # the daemon was down
    refresh, held_at_refresh = engine.window.refresh, []

    def counted(*args: Any, **kwargs: Any) -> None:
        held_at_refresh.append(engine.window.readings())  # all the telemetry stage fed
        refresh(*args, **kwargs)

    monkeypatch.setattr(engine.window, "refresh", counted)
    before = engine.window.readings()
    engine.run_cycle()
    # the three hours read were stored; the window was fed their last 45 minutes only, one
    # reading per GPU and minute (4 GPUs)
    assert held_at_refresh[0] - before == 4 * 45

    with db.session() as s:
        charged = {r.instance_id: r for r in s.exec(select(CostIntervalRow).where(
            CostIntervalRow.start == down_since))}
    assert {iid: (r.end, r.verdict) for iid, r in charged.items()} == {
        "i-idle": (clock.now(), "idle"), "i-busy": (clock.now(), "active"),
        "i-woke": (clock.now(), "active")}
    assert charged["i-idle"].idle_cost_micros == charged["i-idle"].cost_micros > 0
    assert charged["i-busy"].idle_cost_micros == 0

    # what the idle policy looks back on (45 minutes), not the three hours
    start = clock.now() - timedelta(minutes=45)
    for iid in ("i-idle", "i-busy", "i-woke"):
        held = engine.window.minutes(("sim", iid), down_since, clock.now())
        assert min(r.minute for r in held) == start
    assert engine.window.readings() == 4 * 45
