"""The store behaves the same on SQLite and PostgreSQL, and its migrations match its models."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlmodel import SQLModel, select

from costguard.model import GpuMinute, Instance, InstanceState, TelemetrySource
from costguard.store.db import Database, current_revision, head_revision, load_all_tables
from costguard.store.inventory import current_instances, record_inventory
from costguard.store.readings import read_minutes, write_minutes
from costguard.store.tables import InstanceRow

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def _inst(iid: str, state: InstanceState = InstanceState.RUNNING) -> Instance:
    return Instance(provider="aws", account="1", region="us-east-1", instance_id=iid,
                    instance_type="p4d.24xlarge", state=state, gpu_count=8,
                    launch_time=NOW - timedelta(days=2), tags={"team": "research"},
                    observed_at=NOW)


def test_upgrade_reaches_head_and_migrations_match_the_models(db_url: str) -> None:
    load_all_tables()
    db = Database(db_url)
    assert current_revision(db.engine) == head_revision()
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    assert diff == [], f"models changed without a migration: {diff}"
    Database(db_url)  # upgrading again is a no-op
    db.dispose()


def test_inventory_round_trips_with_aware_utc_times_and_tags(db_url: str) -> None:
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1"), _inst("i-2")], NOW, complete=True)
    with db.session() as s:
        got = {i.instance_id: i for i in current_instances(s)}
    assert got["i-1"].launch_time == NOW - timedelta(days=2)
    assert got["i-1"].launch_time.tzinfo is not None
    assert got["i-1"].tags == {"team": "research"}
    assert got["i-1"].gpu_count == 8
    db.dispose()


def test_state_change_is_reported_and_unlisted_instances_are_gone_only_when_complete(
    db_url: str,
) -> None:
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1"), _inst("i-2")], NOW, complete=True)
    later = NOW + timedelta(minutes=5)
    with db.session() as s:
        changes = record_inventory(s, "aws", [_inst("i-1", InstanceState.STOPPED)], later,
                                   complete=False)
    assert [(i.instance_id, prev) for i, prev in changes] == [("i-1", "running")]
    with db.session() as s:
        assert not s.get(InstanceRow, ("aws", "i-2")).gone  # type: ignore[union-attr]
        record_inventory(s, "aws", [_inst("i-1", InstanceState.STOPPED)], later, complete=True)
    with db.session() as s:
        assert s.get(InstanceRow, ("aws", "i-2")).gone  # type: ignore[union-attr]
    db.dispose()


def test_readings_are_idempotent_per_gpu_minute(db_url: str) -> None:
    db = Database(db_url)
    minute = NOW.replace(second=0)
    m = GpuMinute(provider="aws", instance_id="i-1", gpu_index=0, minute=minute,
                  source=TelemetrySource.AGENT, util_mean=3.0, sm_mean=0.0,
                  mem_used_bytes=21 * 2**30)
    with db.session() as s:
        write_minutes(s, [m, m])
    with db.session() as s:
        write_minutes(s, [m.model_copy(update={"util_mean": 4.0})])
    with db.session() as s:
        got = read_minutes(s, [("aws", "i-1")], minute, minute + timedelta(minutes=1))
    assert len(got[("aws", "i-1")]) == 1
    assert got[("aws", "i-1")][0].util_mean == 4.0
    assert got[("aws", "i-1")][0].mem_used_bytes == 21 * 2**30  # BigInteger on PostgreSQL
    with db.session() as s:
        assert list(s.exec(select(InstanceRow))) == []
    db.dispose()


def test_a_later_copy_with_fewer_fields_replaces_the_reading_whole(db_url: str) -> None:
    """Readings are written grouped by which fields they set; a copy that sets fewer (a
    cloud's reading after the agent's, of the same minute) leaves none of the first's."""
    db = Database(db_url)
    minute = NOW.replace(second=0)
    agent = GpuMinute(provider="aws", instance_id="i-1", gpu_index=0, minute=minute,
                      source=TelemetrySource.AGENT, util_mean=3.0, sm_mean=1.0,
                      mem_used_bytes=21 * 2**30, process_count=2, host_cpus=96)
    other = agent.model_copy(update={"instance_id": "i-2"})
    cloud = GpuMinute(provider="aws", instance_id="i-1", gpu_index=0, minute=minute,
                      source=TelemetrySource.CLOUDWATCH, span_minutes=5, util_mean=40.0)
    with db.session() as s:
        write_minutes(s, [agent, other])
    with db.session() as s:
        assert write_minutes(s, [cloud, other.model_copy(update={"util_mean": 7.0})]) == 6
    with db.session() as s:
        got = read_minutes(s, [("aws", "i-1"), ("aws", "i-2")], minute,
                           minute + timedelta(minutes=5))
    assert got[("aws", "i-1")] == [cloud]
    assert got[("aws", "i-2")] == [other.model_copy(update={"util_mean": 7.0})]
    db.dispose()
