"""Leader election and fencing: one replica acts; an ex-leader cannot."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from costguard.clock import ManualClock
from costguard.daemon.fence import FencedProvider, NotLeader, fence_engine
from costguard.daemon.leader import FileLeader, leadership_for
from costguard.daemon.pg_leader import PostgresLeader
from costguard.model import InstanceState
from costguard.store.db import Database
from tests.daemon.daemon_helpers import START, build_engine, scripted_cloud


def _terminate_lock_holders(url: str) -> int:
    conninfo = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks "
            "WHERE locktype = 'advisory' AND pid <> pg_backend_pid()").fetchone()
    return int(row[0]) if row else 0


def test_only_one_postgres_replica_leads_and_a_standby_takes_over(pg_url: str) -> None:
    first, second = PostgresLeader(pg_url), PostgresLeader(pg_url)
    try:
        assert first.try_acquire() and first.held()
        assert not second.try_acquire() and not second.held()
        first.release()  # the leader's process ends: its session and lock go with it
        assert second.try_acquire() and second.held()
        assert not first.try_acquire()
    finally:
        first.release()
        second.release()


def test_a_leader_whose_session_was_cut_fences_itself_off(pg_url: str) -> None:
    leader, standby = PostgresLeader(pg_url), PostgresLeader(pg_url)
    try:
        assert leader.try_acquire()
        assert _terminate_lock_holders(pg_url) == 1  # a partition, as the server sees it
        # pg_terminate_backend only signals the backend: its lock goes when it has exited
        deadline = time.monotonic() + 5
        while not standby.try_acquire() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert standby.try_acquire()
        assert not leader.held()  # it believed it led; the fence asks the server
        assert not leader.try_acquire()
    finally:
        leader.release()
        standby.release()


def test_an_unreachable_database_means_not_leader() -> None:
    leader = PostgresLeader("postgresql+psycopg://nobody@127.0.0.1:1/none")
    leader.connect_timeout = 1
    assert not leader.try_acquire() and not leader.held()


def test_sqlite_replicas_on_one_file_elect_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    first, second = leadership_for(url), leadership_for(url)
    assert isinstance(first, FileLeader)
    assert first.try_acquire() and not second.try_acquire()
    assert (tmp_path / "cg.db.leader").exists()
    first.release()
    assert second.try_acquire() and not first.try_acquire()
    second.release()


def test_election_can_be_switched_off() -> None:
    assert leadership_for("postgresql://x@h/db", election="off").try_acquire()


def test_fenced_providers_refuse_to_act_but_still_read(tmp_path: Path) -> None:
    clock = ManualClock(START)
    cloud = scripted_cloud(clock, idle=1, busy=0)
    leading = [True]
    fenced = FencedProvider(cloud, lambda: leading[0])
    inst = cloud.list_instances().instances[0]
    leading[0] = False
    with pytest.raises(NotLeader, match="no longer the leader"):
        fenced.stop(inst, dry_run=False)
    assert fenced.stop(inst, dry_run=True).outcome == "dry-run"  # changes nothing: allowed
    assert fenced.list_instances().instances and fenced.price(inst) is not None
    assert cloud.instances[inst.instance_id].state is InstanceState.RUNNING
    assert fenced.refused == 1


def test_an_engine_fenced_off_mid_run_journals_the_refusal_and_a_leader_finishes(
        tmp_path: Path) -> None:
    clock = ManualClock(START)
    cloud = scripted_cloud(clock, idle=2, busy=1)
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    engine = build_engine(db, cloud, clock)
    leading = [True]
    fence_engine(engine, lambda: leading[0])
    assert all(isinstance(p, FencedProvider) for p in engine.runner.providers.values())
    engine.run_cycle()  # warns: grace 2m
    clock.advance(engine.settings.poll_interval * 2)
    leading[0] = False
    engine.run_cycle()  # due, but this replica lost the lock: nothing stops
    assert [i.state for i in cloud.instances.values()].count(InstanceState.STOPPED) == 0
    successor = build_engine(db, cloud, clock)
    clock.advance(engine.settings.poll_interval)
    successor.run_cycle()
    assert [i.state for i in cloud.instances.values()].count(InstanceState.STOPPED) == 2
    from tests.daemon.daemon_helpers import stop_journal

    for statuses in stop_journal(db).values():
        assert statuses == ["failed", "done"]
