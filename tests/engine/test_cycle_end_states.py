"""A cycle always ends in a state: `ok`, `failed`, `interrupted` (Ctrl-C) or, when its
process died, `abandoned`, closed by the next cycle of this process or another; `costguard
status` counts them. Rows left `running` used to stay so for ever, through clean restarts,
while status said "failed cycles: 0"."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.daemon.health import gather_status
from costguard.engine import cycle_rows
from costguard.store.db import Database
from costguard.store.tables import CycleRow
from tests.engine.conftest import EngineFactory


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid  # reaped: no process has it (until the system reuses it)


def _left_running(db: Database, clock: ManualClock, runner: dict[str, object] | None,
                  ago: timedelta) -> int:
    with db.session() as s:
        row = CycleRow(started_at=clock.now() - ago,
                       summary={"runner": runner} if runner is not None else {})
        s.add(row)
        s.flush()
        return row.id or 0


def _status(db: Database, cycle_id: int) -> tuple[str, str | None]:
    with db.session() as s:
        row = s.get(CycleRow, cycle_id)
        assert row is not None
        return row.status, row.error


def test_cycles_of_dead_processes_are_closed_by_the_next_and_live_ones_are_not(
        make_engine: EngineFactory, clock: ManualClock, db: Database) -> None:
    host = socket.gethostname()
    dead = _left_running(db, clock, {"host": host, "pid": _dead_pid(), "token": "x"},
                         timedelta(minutes=2))
    reused = _left_running(db, clock, {"host": host, "pid": os.getpid(), "token": "old"},
                           timedelta(minutes=2))
    live = _left_running(db, clock, {"host": host, "pid": os.getppid(), "token": "y"},
                         timedelta(minutes=2))
    elsewhere_recent = _left_running(db, clock, {"host": "replica-b", "pid": 1, "token": "z"},
                                     timedelta(minutes=20))
    elsewhere_old = _left_running(db, clock, {"host": "replica-b", "pid": 1, "token": "z"},
                                  timedelta(hours=2))
    before_runners = _left_running(db, clock, None, timedelta(hours=3))

    summary = make_engine().run_cycle()

    assert summary.abandoned_cycles == 4
    assert _status(db, dead)[0] == "abandoned"
    assert "ended before it finished" in (_status(db, dead)[1] or "")
    assert _status(db, reused) == ("abandoned", f"its process (pid {os.getpid()}) ended: this "
                                                "process has that pid now")
    assert _status(db, live)[0] == "running"  # its process (our parent) lives
    assert _status(db, elsewhere_recent)[0] == "running"  # another replica's, may be live
    assert _status(db, elsewhere_old)[0] == "abandoned"
    assert _status(db, before_runners)[0] == "abandoned"
    assert _status(db, summary.cycle_id)[0] == "ok"
    status = gather_status(db, clock.now(), 300)
    assert (status["abandoned_cycles"], status["running_cycles"]) == (4, 2)


def test_ctrl_c_in_a_stage_ends_the_cycle_interrupted(make_engine: EngineFactory,
                                                       db: Database,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine()

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "_accrue", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.run_cycle()
    with db.session() as s:
        rows = list(s.exec(select(CycleRow)))
    assert [(r.status, r.error) for r in rows] == [
        ("interrupted", "interrupted (Ctrl-C) in the accrue stage")]
    assert rows[0].finished_at is not None
    # the next cycle runs on the same store: nothing was left locked
    assert make_engine().run_cycle().abandoned_cycles == 0


def test_a_failed_cycle_says_why_and_is_not_abandoned_later(make_engine: EngineFactory,
                                                            db: Database,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    engine = make_engine()
    monkeypatch.setattr(engine, "_accrue", lambda *_: (_ for _ in ()).throw(
        RuntimeError("price table gone")))
    with pytest.raises(RuntimeError):
        engine.run_cycle()
    make_engine().run_cycle()
    with db.session() as s:
        assert [(r.status, r.error) for r in s.exec(select(CycleRow).order_by(
            CycleRow.id))][:1] == [("failed", "RuntimeError: price table gone")]  # type: ignore[arg-type]


def test_the_runner_is_recorded_and_a_fork_is_a_runner_of_its_own() -> None:
    mine = cycle_rows.runner()
    assert (mine["host"], mine["pid"]) == (socket.gethostname(), os.getpid())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, cycle_rows.runner()["token"].encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 64).decode() != mine["token"]
