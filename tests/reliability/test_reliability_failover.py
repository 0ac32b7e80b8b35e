"""High availability: two replicas of the daemon against one PostgreSQL and one cloud.

The leader dies (SIGKILL) in the middle of a batch of stops; the standby takes over within
one poll interval and finishes the batch. Read back from the action journal and the cloud:
every stop happened exactly once, none was lost.

Start-ups are kept off the critical path: a standby's interpreter is started early, waiting
behind a gate file (`CG_GATE`) with its imports done, and the leader is frozen (SIGSTOP) at
the fault point and SIGKILLed there once the standby is up, instead of racing a long grace
period against the standby's start-up.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from sqlmodel import col, select

from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, CycleRow, PolicyStateRow
from tests.daemon.daemon_helpers import stop_journal, wait_until
from tests.reliability.replicas import Replica, start_replica, write_config
from tests.reliability.shared_cloud import SharedState

POLL_S = 2.0


def _settled(db: Database) -> bool:
    """Nothing in flight: no unresolved intent and no warned pair past its deadline."""
    now = datetime.now(UTC)
    with db.session() as s:
        intents = s.exec(select(ActionJournalRow).where(ActionJournalRow.status == "intent")
                         ).first()
        overdue = [st for st in s.exec(select(PolicyStateRow).where(
            PolicyStateRow.state == "warned")) if st.deadline and st.deadline < now]
    return intents is None and not overdue


def _check_exactly_once(db: Database, state: SharedState) -> dict[str, list[str]]:
    journal = stop_journal(db)
    cloud = state.read()
    done_instances = set()
    for key, statuses in journal.items():
        assert statuses.count("done") == 1, f"{key}: {statuses}"
        done_instances.add(key.split("|")[2])
    assert cloud["stops"], "the policy stopped nothing: the test proves nothing"
    assert all(n == 1 for n in cloud["stops"].values()), f"doubled in the cloud: {cloud['stops']}"
    assert set(cloud["stops"]) == done_instances  # no untraced stop, no journaled phantom
    return journal


def _cycles_started_after(db: Database, when: datetime) -> list[CycleRow]:
    with db.session() as s:
        return list(s.exec(select(CycleRow).where(col(CycleRow.started_at) > when)
                           .order_by(col(CycleRow.id))))


def test_the_standby_takes_over_a_killed_leader_without_missing_or_doubling_a_stop(
        pg_url: str, tmp_path: Path) -> None:
    root = write_config(tmp_path, grace="3s")
    state = SharedState(tmp_path / "cloud.json")
    db = Database(pg_url)
    gate = tmp_path / "second.go"
    # frozen right after journaling the third stop intent: the point it is killed at below
    first = start_replica(root, pg_url, state.path, "first",
                          env={"CG_PAUSE_AT": "after-intent:3"})
    second = start_replica(root, pg_url, state.path, "second", env={"CG_GATE": str(gate)})
    try:
        wait_until(lambda: first.proc.poll() is not None or first.leads(), 60,
                   "the first replica to lead")
        gate.touch()
        wait_until(lambda: _answers(second), 60, "the standby")
        wait_until(lambda: _proc_state(first) in ("T", "?"), 60,
                   "the leader to reach its third stop")
        assert first.proc.poll() is None and not second.leads(), \
            "the leader died before the standby was up: nothing to take over"
        first.proc.kill()  # SIGKILL where it stands: one stop journaled, its call not made
        first.proc.wait(timeout=30)
        died_at = datetime.now(UTC)
        assert first.proc.returncode == -signal.SIGKILL, first.log.read_text()[-2000:]
        wait_until(lambda: len(_cycles_started_after(db, died_at)) >= 2, 30,
                   "the standby's cycles")
        took_over = _cycles_started_after(db, died_at)[0].started_at
        assert (took_over - died_at).total_seconds() <= POLL_S + 1.0
        wait_until(lambda: _settled(db), 30, "the stops to settle")
        assert second.leads()
        journal = _check_exactly_once(db, state)
        # the intent the leader died with was reconciled, then carried out by the successor
        # (the replicas' logs say which stop the leader froze at, if this ever fails: it
        # failed once under a loaded full run and not in 15 runs beside two busy cores)
        assert any(st == ["interrupted", "done"] for st in journal.values()), (
            f"{journal}\n--- first\n{_tail(first)}\n--- second\n{_tail(second)}")
        print(f"failover: 1 leader killed mid-batch, {len(journal)} stops, all exactly once")
    finally:
        first.stop()
        second.stop()
        db.dispose()


def _answers(replica: Replica) -> bool:
    from tests.daemon.daemon_helpers import get

    return get(f"{replica.base}/healthz", timeout=1.0) is not None


def _terminate_all_sessions(url: str) -> int:
    conninfo = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                           ).fetchone()
    return int(row[0]) if row else 0


def test_a_frozen_leader_that_wakes_after_losing_its_lock_cannot_act(
        pg_url: str, tmp_path: Path) -> None:
    root = write_config(tmp_path, grace="2s")
    state = SharedState(tmp_path / "cloud.json")
    db = Database(pg_url)
    gate = tmp_path / "second.go"
    first = start_replica(root, pg_url, state.path, "first",
                          env={"CG_PAUSE_AT": "after-intent:1"})
    # imports done meanwhile; it opens no connection before the gate (the sessions cut below
    # are the frozen leader's alone, as when the standby started only then)
    second = start_replica(root, pg_url, state.path, "second", env={"CG_GATE": str(gate)})
    try:
        # frozen right after journaling its first stop intent, before the cloud call
        wait_until(lambda: _proc_state(first) == "T", 60, "the leader to freeze mid-stop")
        assert _terminate_all_sessions(pg_url) >= 1  # the server drops the silent session
        wait_until(lambda: not _sessions_of(pg_url, first.proc.pid), 10,
                   "the frozen leader's sessions to end")
        gate.touch()
        wait_until(lambda: second.leads(), 60, "the standby to lead")
        wait_until(lambda: _settled(db), 30, "the successor's stops")
        first.proc.send_signal(signal.SIGCONT)  # the ex-leader resumes its stop ...
        try:
            wait_until(lambda: "leadership lost" in first.log.read_text(), 20,
                       "the ex-leader to notice")
        except AssertionError:
            raise AssertionError("the ex-leader acted unfenced:\n" + _tail(first) + "\n---\n"
                                 + _tail(second)) from None
        time.sleep(POLL_S)
        _check_exactly_once(db, state)
        with db.session() as s:
            details = [r.detail for r in s.exec(select(ActionJournalRow))]
        assert any("no longer the leader" in d for d in details)  # ... and the fence refused
    finally:
        if first.proc.poll() is None:
            first.proc.send_signal(signal.SIGCONT)
        first.stop()
        second.stop()
        db.dispose()


def _sessions_of(url: str, pid: int) -> list[tuple[object, ...]]:
    conninfo = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return conn.execute("SELECT pid, state FROM pg_stat_activity WHERE application_name "
                            "= %s", (f"costguard-leader pid={pid}",)).fetchall()


def _tail(replica: Replica | None, lines: int = 40) -> str:
    if replica is None:
        return ""
    return "\n".join(replica.log.read_text().splitlines()[-lines:])


def _proc_state(replica: Replica) -> str:
    try:
        stat = Path(f"/proc/{replica.proc.pid}/stat").read_text()
    except OSError:
        return "?"
    return stat.rsplit(")", 1)[1].split()[0]
