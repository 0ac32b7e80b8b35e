"""The daemon under provider throttling storms, outages, database loss and clock jumps.

Each test drives the real `Daemon.cycle_job` (leader check, lock, engine cycle, metrics) on
a manual clock, injects faults, and checks the outcome from the store: the daemon never
died, failures were counted, and each due stop was carried out exactly once.
"""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import func, select

from costguard.clock import ManualClock
from costguard.daemon.scheduler import Daemon
from costguard.model import InstanceState
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, CostIntervalRow, CycleRow
from tests.daemon.daemon_helpers import (
    START,
    assert_each_stop_done_once,
    build_engine,
    quiet_daemon,
    scripted_cloud,
    stop_journal,
)
from tests.pg import PostgresServer, as_user
from tests.reliability.faults import FlakyProvider

MINUTE = timedelta(minutes=1)


def _daemon(db: Database, clock: ManualClock, idle: int = 6, busy: int = 4
            ) -> tuple[Daemon, FlakyProvider]:
    cloud = scripted_cloud(clock, idle=idle, busy=busy)
    flaky = FlakyProvider(cloud, seed=7)
    engine = build_engine(db, flaky, clock)
    return Daemon(engine, engine.settings, quiet_daemon()), flaky


def _cloud_states(flaky: FlakyProvider) -> dict[str, InstanceState]:
    return {iid: i.state for iid, i in flaky.inner.instances.items()}  # type: ignore[attr-defined]


def _run(daemon: Daemon, clock: ManualClock, cycles: int) -> int:
    ok = 0
    for _ in range(cycles):
        ok += daemon.cycle_job() is not None  # never raises: a failed cycle returns None
        clock.advance(MINUTE)
    return ok


def _failures(daemon: Daemon) -> float:
    return sum(s.value for m in daemon.metrics.errors.collect() for s in m.samples
               if s.name.endswith("_total"))


def test_a_throttling_storm_delays_stops_but_never_doubles_or_drops_them(
        db_url: str) -> None:
    clock = ManualClock(START)
    db = Database(db_url)
    daemon, flaky = _daemon(db, clock)
    flaky.rate = 0.5
    _run(daemon, clock, 25)
    storm = flaky.total
    flaky.rate = 0.0
    _run(daemon, clock, 4)
    states = _cloud_states(flaky)
    assert [iid for iid, s in states.items() if s is InstanceState.STOPPED] == [
        f"i-idle{i}" for i in range(6)]
    assert assert_each_stop_done_once(db) == 6
    assert storm >= 10 and _failures(daemon) >= 1
    print(f"throttling storm: {storm} faults injected {dict(flaky.injected)}, survived all")
    db.dispose()


def test_an_outage_opens_a_gap_acts_on_nothing_and_recovers(tmp_path: Path) -> None:
    clock = ManualClock(START)
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    daemon, flaky = _daemon(db, clock)
    _run(daemon, clock, 1)  # warned; stops due two minutes later
    flaky.outage = True
    assert _run(daemon, clock, 10) == 10  # an unreachable cloud is a gap, not a failed cycle
    assert all(s is InstanceState.RUNNING for s in _cloud_states(flaky).values())
    gaps = "".join(str(s) for m in daemon.metrics.gaps.collect() for s in m.samples)
    assert "111111111111/us-east-1" in gaps  # the unreadable scope is exported as a gap
    assert flaky.injected["outage:stop"] >= 1  # due stops were tried, failed, and journaled
    with db.session() as s:
        failed = s.execute(select(func.count()).select_from(ActionJournalRow).where(
            ActionJournalRow.status == "failed")).scalar()  # type: ignore[arg-type]
    assert failed and failed >= 1
    flaky.outage = False
    _run(daemon, clock, 15)
    assert not list(next(iter(daemon.metrics.gaps.collect())).samples)  # the gap closed
    # the outage left no evidence of idleness, so the warnings lapsed and the stops came
    # after fresh warnings: each instance stopped exactly once, nothing left unresolved
    per_instance: dict[str, list[str]] = {}
    for key, statuses in stop_journal(db).items():
        assert "intent" not in statuses, f"{key} left unresolved: {statuses}"
        per_instance.setdefault(key.split("|")[2], []).extend(statuses)
    assert len(per_instance) == 6
    assert all(st.count("done") == 1 for st in per_instance.values()), per_instance
    states = _cloud_states(flaky)
    assert [i for i, s in states.items() if s is InstanceState.STOPPED] == sorted(per_instance)
    print(f"outage: {flaky.total} faults injected, survived all")


def _terminate_sessions(url: str) -> int:
    conninfo = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                           ).fetchone()
    return int(row[0]) if row else 0


def test_database_connections_cut_mid_cycle_are_survived(pg_url: str) -> None:
    clock = ManualClock(START)
    db = Database(pg_url)
    daemon, flaky = _daemon(db, clock)
    cuts = [0]

    def cut() -> None:  # between the collect stage's writes and the telemetry stage's
        if clock.now().minute % 3 == 0:
            cuts[0] += _terminate_sessions(pg_url) > 0

    flaky.before["gpu_metrics"] = cut
    flaky.before["stop"] = cut
    _run(daemon, clock, 15)
    flaky.before.clear()
    _run(daemon, clock, 3)
    assert cuts[0] >= 3
    assert assert_each_stop_done_once(db) == 6
    with db.session() as s:
        ok = s.execute(select(func.count()).select_from(CycleRow)
                       .where(CycleRow.status == "ok")).scalar()  # type: ignore[arg-type]
    assert ok and ok >= 3
    print(f"database sessions cut mid-cycle: {cuts[0]} faults injected, survived all")
    db.dispose()


def _restart(server: PostgresServer) -> None:
    # -l: the restarted server must log to its file, not to a pipe we would wait on forever
    done = subprocess.run(as_user(server.user, [
        server.binaries.pg_ctl, "-D", str(server.data_dir), "-l", str(server.log_file),
        "-m", "fast", "-w", "-t", "30", "restart"]), cwd=server.root,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        timeout=60, check=False)
    assert done.returncode == 0, server.log_file.read_text()[-2000:]


def test_a_database_restart_mid_cycle_is_survived(pg_server: PostgresServer,
                                                  pg_url: str) -> None:
    clock = ManualClock(START)
    db = Database(pg_url)
    daemon, flaky = _daemon(db, clock)
    restarts = [0]

    def restart_once() -> None:
        if restarts[0] == 0:
            restarts[0] += 1
            _restart(pg_server)

    _run(daemon, clock, 2)
    flaky.before["stop"] = restart_once  # the server goes away as the first stop starts
    _run(daemon, clock, 5)
    assert restarts[0] == 1
    assert assert_each_stop_done_once(db) == 6
    print("database restart mid-cycle: 1 fault injected, survived")
    db.dispose()


@pytest.mark.parametrize("jump", [timedelta(hours=6), -timedelta(minutes=30)],
                         ids=["forward-6h", "backward-30m"])
def test_clock_jumps_neither_break_cycles_nor_double_stops(db_url: str,
                                                           jump: timedelta) -> None:
    clock = ManualClock(START)
    db = Database(db_url)
    daemon, _ = _daemon(db, clock)
    assert _run(daemon, clock, 1) == 1
    clock.advance(jump)
    ok = _run(daemon, clock, 40)
    assert ok == 40, daemon.state.last_error
    assert assert_each_stop_done_once(db) == 6
    with db.session() as s:
        bad = s.execute(select(func.count()).select_from(CostIntervalRow).where(
            (CostIntervalRow.end < CostIntervalRow.start)  # type: ignore[arg-type]
            | (CostIntervalRow.cost_micros < 0))).scalar()
    assert bad == 0
    print(f"clock jump {jump}: 1 fault injected, survived")
    db.dispose()
