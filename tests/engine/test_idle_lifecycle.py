"""The engine end to end on a scripted cloud: warn, then act; never without data; never dry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.model import ActionResult, Instance, InstanceState
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow, CostIntervalRow, PolicyStateRow
from tests.engine.conftest import EngineFactory, run_for
from tests.fakes.cloud import T0, ScriptedCloud, always, until


def _journal(db: Database) -> list[ActionJournalRow]:
    with db.session() as s:
        return list(s.exec(select(ActionJournalRow).order_by(ActionJournalRow.id)))  # type: ignore[arg-type]


def _alerts(db: Database) -> list[AlertRow]:
    with db.session() as s:
        return list(s.exec(select(AlertRow)))


def test_idle_instance_is_warned_before_it_is_stopped(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-idle", always("held_memory_idle"))
    cloud.add("i-busy", always("busy"))
    engine = make_engine()
    engine.run_cycle()  # first cycle looks back an hour: already idle for 45 min
    warned = [a for a in _alerts(db) if a.kind == "idle-warning"]
    assert [a.instance_id for a in warned] == ["i-idle"]
    assert "holds" in warned[0].context["evidence"]  # memory held is named as evidence
    assert cloud.instances["i-idle"].state is InstanceState.RUNNING  # not before the deadline

    run_for(engine, clock, timedelta(minutes=10))
    assert cloud.calls["stop"] == 0
    run_for(engine, clock, timedelta(minutes=10))
    assert cloud.instances["i-idle"].state is InstanceState.STOPPED
    assert cloud.instances["i-busy"].state is InstanceState.RUNNING
    assert cloud.calls["stop"] == 1
    stops = [j for j in _journal(db) if j.action == "stop"]
    assert [(j.instance_id, j.status) for j in stops] == [("i-idle", "done")]
    assert any(a.kind == "action" and a.instance_id == "i-idle" for a in _alerts(db))


def test_instance_without_telemetry_is_never_stopped(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-noagent", always(None))
    engine = make_engine()
    run_for(engine, clock, timedelta(hours=3))
    assert cloud.calls["stop"] == 0
    assert not _alerts(db)
    with db.session() as s:
        assert not list(s.exec(select(PolicyStateRow).where(PolicyStateRow.state == "warned")))


def test_partial_telemetry_below_coverage_is_not_idle(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock
) -> None:
    # reports only every third minute: 33% coverage, below the 80% the policy needs
    cloud.add("i-gappy", lambda m: "no_process" if m.minute % 3 == 0 else None)
    run_for(make_engine(), clock, timedelta(hours=2))
    assert cloud.calls["stop"] == 0


def test_dry_run_policy_never_changes_an_instance(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-idle", always("no_process"))
    run_for(make_engine(mode="dry-run"), clock, timedelta(hours=2))
    assert cloud.instances["i-idle"].state is InstanceState.RUNNING
    assert cloud.calls["stop"] == 0 and cloud.calls["tags"] == 0
    assert cloud.calls["stop-dry"] == 1  # permission proven once, through the API's dry run
    assert [j.status for j in _journal(db) if j.action == "stop"] == ["dry-run"]
    assert not _alerts(db)  # owners are not told about stops that will not happen


def test_tiny_kernels_are_idle_by_sm_activity(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock
) -> None:
    cloud.add("i-poller", always("tiny_kernels"))  # util_gpu reads ~12%, SMs do nothing
    run_for(make_engine(), clock, timedelta(hours=1, minutes=30))
    assert cloud.instances["i-poller"].state is InstanceState.STOPPED


def test_warned_instance_that_gets_busy_is_cleared_not_stopped(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-nb", until(T0 + timedelta(minutes=5), "held_memory_idle", "busy"))
    run_for(make_engine(), clock, timedelta(hours=2))
    assert cloud.calls["stop"] == 0
    kinds = [a.kind for a in _alerts(db)]
    assert kinds == ["idle-warning", "cleared"]


def test_protected_instance_is_never_touched(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-prot", always("no_process"),
              tags={"team": "research", "costguard:protect": "true"})
    cloud.add("i-decoy", always("no_process"),
              tags={"team": "research", "costguard:protect": "false"})
    run_for(make_engine(), clock, timedelta(hours=2))
    assert cloud.instances["i-prot"].state is InstanceState.RUNNING
    assert cloud.instances["i-decoy"].state is InstanceState.STOPPED
    skips = [j for j in _journal(db) if j.instance_id == "i-prot"]
    assert [(j.action, j.status) for j in skips] == [("skip", "skipped")]


def test_policy_over_its_cap_acts_on_none_and_alerts(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    for n in range(3):
        cloud.add(f"i-{n}", always("no_process"))
    run_for(make_engine(cap=2), clock, timedelta(hours=1))
    assert cloud.calls["stop"] == 0
    assert any(a.kind == "cap" for a in _alerts(db))


def test_pause_stops_all_actions(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    from costguard.store import control

    cloud.add("i-idle", always("no_process"))
    with db.session() as s:
        control.put(s, control.PAUSED, "true", clock.now())
    engine = make_engine()
    run_for(engine, clock, timedelta(hours=2))
    assert cloud.calls["stop"] == 0
    with db.session() as s:
        control.put(s, control.PAUSED, "false", clock.now())
    run_for(engine, clock, timedelta(minutes=30))
    assert cloud.calls["stop"] == 1


def test_restarted_instance_starts_a_new_episode(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-idle", always("no_process"))
    engine = make_engine()
    run_for(engine, clock, timedelta(hours=1))
    assert cloud.calls["stop"] == 1
    cloud.restart("i-idle")
    run_for(engine, clock, timedelta(hours=2))
    assert cloud.calls["stop"] == 2
    assert [j.key.rsplit("|", 1)[1] for j in _journal(db) if j.action == "stop"] == ["1", "2"]


def test_accrual_charges_running_time_exactly_and_idle_dollars(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-idle", always("no_process"))  # $3.60/h in the scripted cloud
    cloud.add("i-busy", always("busy"))
    engine = make_engine(mode="dry-run")
    run_for(engine, clock, timedelta(minutes=35))  # cycles at 0, 5, ..., 30: 30 minutes accrued
    with db.session() as s:
        rows = list(s.exec(select(CostIntervalRow)))
    cost = {iid: sum(r.cost_micros for r in rows if r.instance_id == iid)
            for iid in ("i-idle", "i-busy")}
    assert cost == {"i-idle": 1_800_000, "i-busy": 1_800_000}  # $1.80 each, to the micro-dollar
    idle = {iid: sum(r.idle_cost_micros for r in rows if r.instance_id == iid)
            for iid in ("i-idle", "i-busy")}
    assert idle == {"i-idle": 1_800_000, "i-busy": 0}
    assert {r.team for r in rows} == {"research"}


@pytest.mark.parametrize(("evidence", "idle_micros"), [("any", 1_800_000), ("agent", 0)])
def test_accounting_idle_evidence_agent_counts_no_other_readings_as_waste(
    cloud: ScriptedCloud, clock: ManualClock, db: Database, db_url: str, evidence: str,
    idle_micros: int
) -> None:
    # the scripted cloud's readings are the cloud's, not the agent's: with
    # `accounting.idle_evidence: agent` its idle half hour is charged, and not called waste
    cloud.add("i-idle", always("no_process"))
    settings = Settings(database_url=db_url, policy_paths=[],
                        accounting={"idle_evidence": evidence})
    engine = Engine(settings, db, {"sim": cloud}, parse_policy_text("policies: []"), clock)
    run_for(engine, clock, timedelta(minutes=35))
    with db.session() as s:
        rows = list(s.exec(select(CostIntervalRow)))
    assert sum(r.cost_micros for r in rows) == 1_800_000
    assert sum(r.idle_cost_micros for r in rows) == idle_micros
    assert {r.verdict for r in rows} == ({"idle"} if evidence == "any" else {"no-data"})


def test_stopped_instance_stops_accruing(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-idle", always("no_process"))
    engine = make_engine()
    run_for(engine, clock, timedelta(hours=1))  # stopped at T0+15m (deadline after warning)
    with db.session() as s:
        total = sum(r.cost_micros for r in s.exec(select(CostIntervalRow)))
    assert total == 900_000  # 15 minutes at $3.60/h: nothing after the stop



def test_metrics_outage_is_a_gap_and_never_idle(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock
) -> None:
    from costguard.errors import ProviderError

    cloud.add("i-idle", always("no_process"))

    def down(*args: object) -> list[object]:
        raise ProviderError("sim", "111111111111/us-east-1", "metrics endpoint unreachable")

    cloud.gpu_metrics = down  # type: ignore[method-assign,assignment]
    engine = make_engine()
    summary = engine.run_cycle()  # the cycle completes
    assert [g["scope"] for g in summary.gaps] == ["111111111111/us-east-1 metrics"]
    run_for(engine, clock, timedelta(hours=2))
    assert cloud.calls["stop"] == 0  # no readings is no data, never idle


def _stop_raising(cloud: ScriptedCloud, *, took_effect: bool, times: int = 1) -> None:
    from costguard.errors import ProviderError

    real = cloud.stop
    failures = [times]

    def stop(instance: Instance, *, dry_run: bool) -> ActionResult:
        if failures[0] > 0 and not dry_run:
            failures[0] -= 1
            if took_effect:
                real(instance, dry_run=False)  # the cloud stopped it; the answer was lost
            raise ProviderError("sim", "111111111111/us-east-1", "read timeout")
        return real(instance, dry_run=dry_run)

    cloud.stop = stop  # type: ignore[method-assign]


def test_a_stop_that_failed_but_took_effect_is_reconciled_as_done_once(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-idle", always("no_process"))
    _stop_raising(cloud, took_effect=True)
    run_for(make_engine(), clock, timedelta(hours=1))
    assert cloud.instances["i-idle"].state is InstanceState.STOPPED
    assert cloud.calls["stop"] == 1  # never called again: inventory showed it stopped
    stops = [(j.status, j.detail.split(":")[0]) for j in _journal(db) if j.action == "stop"]
    assert stops == [("failed", "sim 111111111111/us-east-1"), ("done", "reconciled")]
    assert len([a for a in _alerts(db) if a.kind == "action"]) == 1  # the owner is told once
    with db.session() as s:
        st = s.exec(select(PolicyStateRow).where(PolicyStateRow.instance_id == "i-idle")).one()
    assert st.state == "acted"


def test_a_stop_that_failed_without_effect_is_retried_until_done(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    cloud.add("i-idle", always("no_process"))
    _stop_raising(cloud, took_effect=False, times=2)
    run_for(make_engine(), clock, timedelta(hours=1))
    assert cloud.instances["i-idle"].state is InstanceState.STOPPED
    assert cloud.calls["stop"] == 1  # the two failures never reached the cloud
    assert [j.status for j in _journal(db) if j.action == "stop"] == ["failed", "failed", "done"]
    assert len([a for a in _alerts(db) if a.kind == "action"]) == 1


def test_cloud_metrics_are_asked_again_for_their_settle_window(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock
) -> None:
    from datetime import datetime

    cloud.add("i-busy", always("busy"))
    asked: list[tuple[datetime, datetime]] = []
    real = cloud.gpu_metrics

    def record(instances: Any, start: datetime, end: datetime) -> Any:
        asked.append((start, end))
        return real(instances, start, end)

    cloud.gpu_metrics = record  # type: ignore[method-assign]
    cloud.metrics_settle = timedelta(minutes=10)  # type: ignore[attr-defined]
    engine = make_engine()
    engine.run_cycle()
    clock.advance(timedelta(minutes=5))
    engine.run_cycle()
    (_, first_end), (second_start, _) = asked
    assert second_start == first_end - timedelta(minutes=10)  # late points are fetched again


def test_a_metrics_gap_alerts_once_and_closes_when_metrics_read_again(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database
) -> None:
    from costguard.model import Gap
    from costguard.store.tables import GapRow

    cloud.add("i-busy", always("busy"))
    cloud.metric_gaps = [Gap(provider="sim", scope="222222222222/eu-west-1",  # type: ignore[attr-defined]
                             error="AccessDenied: cloudwatch:GetMetricData")]
    engine = make_engine()
    run_for(engine, clock, timedelta(minutes=10))
    gap_alerts = [a for a in _alerts(db) if a.kind == "gap"]
    assert [a.subject for a in gap_alerts] == [
        "costguard cannot read sim 222222222222/eu-west-1 metrics"]
    assert "treated as idle" in gap_alerts[0].body  # says what the gap means for actions
    cloud.metric_gaps = []  # type: ignore[attr-defined]
    run_for(engine, clock, timedelta(minutes=5))
    with db.session() as s:
        rows = list(s.exec(select(GapRow)))
    assert [(r.scope, r.resolved_at is not None) for r in rows] == [
        ("222222222222/eu-west-1 metrics", True)]
    assert len([a for a in _alerts(db) if a.kind == "gap"]) == 1
