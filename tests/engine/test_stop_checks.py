"""The stop's checks in the engine (policy/stop_check.py): an idle GPU on a host that shows
work in progress is idle-but-busy (waste, never stopped unless the policy says so); a window
of untrusted minutes is no data for the stop; and what the host showed reaches the warning,
the journal, the cycle summary and `costguard explain`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.costs.pricing import PriceCatalog
from costguard.engine import Engine
from costguard.model import GpuMinute, Instance, InstanceState
from costguard.policy.load import parse_policy_text
from costguard.report.explain import explain
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow
from tests.engine.conftest import run_for
from tests.fakes.cloud import T0, ScriptedCloud

POLICY = """\
policies:
  - name: idle-gpu
    mode: enforce
    filters: {{gpu: true, state: running}}
    condition:
      idle: {{below: 5, for: 45m}}
    actions:
      - notify: {{to: owner}}
      - stop: {{grace: 15m{extra}}}
"""
Host = Callable[[datetime], dict[str, object]]


def quiet(minute: datetime) -> dict[str, object]:
    """A host at rest: 0.12 cores busy, a trickle of disk and network."""
    return {"host_cpu_pct": 1.5, "host_cpus": 8, "host_disk_bps": 40_000.0,
            "host_net_bps": 3_000.0, "power_limit_w": 700.0}


def copying(minute: datetime) -> dict[str, object]:
    """A dataset copy into the job's directory: 180 MB/s of disk, half a core busy."""
    return {**quiet(minute), "host_disk_bps": 180e6, "host_cpu_pct": 6.0}


class AgentCloud(ScriptedCloud):
    """The scripted cloud whose readings carry the host's figures, as an agent's do."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.hosts: dict[str, Host] = {}
        self.override: dict[str, Callable[[GpuMinute], GpuMinute]] = {}

    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        out = []
        for m in super().gpu_metrics(instances, start, end):
            extra = self.hosts.get(m.instance_id, quiet)(m.minute)
            m = m.model_copy(update=extra)
            fix = self.override.get(m.instance_id)
            out.append(fix(m) if fix else m)
        return out


def engine_for(db: Database, db_url: str, cloud: ScriptedCloud, clock: ManualClock,
               extra: str = "") -> Engine:
    settings = Settings(database_url=db_url, policy_paths=[])
    return Engine(settings, db, {"sim": cloud},
                  parse_policy_text(POLICY.format(extra=extra), "test.yml"), clock)


def journal(db: Database, action: str) -> list[ActionJournalRow]:
    with db.session() as s:
        return list(s.exec(select(ActionJournalRow).where(ActionJournalRow.action == action)))


def test_an_idle_gpu_on_a_busy_host_is_waste_but_never_stopped(db: Database, db_url: str) -> None:
    clock = ManualClock(T0)
    cloud = AgentCloud(clock)
    cloud.add("i-copy", lambda m: "held_memory_idle")
    cloud.hosts["i-copy"] = copying
    cloud.add("i-quiet", lambda m: "held_memory_idle")
    engine = engine_for(db, db_url, cloud, clock)
    run_for(engine, clock, timedelta(hours=2))
    summary = engine.run_cycle()
    assert cloud.instances["i-copy"].state is InstanceState.RUNNING
    assert cloud.instances["i-quiet"].state is InstanceState.STOPPED
    assert summary.held_back == {"idle-gpu": 1}
    assert summary.idle_usd > 0  # still idle waste
    assert "stops held back (work in progress on the host" in "\n".join(summary.lines())
    with db.session() as s:
        warned = [a.instance_id for a in s.exec(select(AlertRow).where(
            AlertRow.kind == "idle-warning"))]
        answer = explain(s, "i-copy", engine.policies, PriceCatalog(), clock.now())
    assert warned == ["i-quiet"]
    [policy] = answer.policies
    assert not policy.holds
    assert policy.reasons[0].startswith("idle-but-busy: host busy (last 10 min): disk up to "
                                        "180.0 MB/s; the stop is held back")
    assert "Host busy (last 10 min)" in answer.telemetry["summary"]
    # the stop that went ahead says what the host showed, in the warning and the journal
    [stop] = journal(db, "stop")
    assert stop.instance_id == "i-quiet"
    assert "host quiet (last 10 min): CPU 2% (0.12 cores), disk up to 0.0 MB/s" in stop.detail


def test_when_host_busy_stop_judges_on_the_gpus_alone(db: Database, db_url: str) -> None:
    clock = ManualClock(T0)
    cloud = AgentCloud(clock)
    cloud.add("i-copy", lambda m: "held_memory_idle")
    cloud.hosts["i-copy"] = copying
    run_for(engine_for(db, db_url, cloud, clock, ", when_host_busy: stop"), clock,
            timedelta(hours=2))
    assert cloud.instances["i-copy"].state is InstanceState.STOPPED
    [stop] = journal(db, "stop")
    assert "host busy (last 10 min): disk up to 180.0 MB/s; stopping anyway " in stop.detail


def test_a_warned_instance_whose_host_gets_busy_is_cleared(db: Database, db_url: str) -> None:
    clock = ManualClock(T0)
    cloud = AgentCloud(clock)
    cloud.add("i-nb", lambda m: "held_memory_idle")
    # warned at the first cycle (it looks back an hour); someone logs in and types during
    # the grace
    cloud.hosts["i-nb"] = lambda minute: {**quiet(minute), "host_sessions": 1,
                                          "host_input_idle_s": 20.0} if (
        minute >= T0 + timedelta(minutes=5)) else quiet(minute)
    run_for(engine_for(db, db_url, cloud, clock), clock, timedelta(hours=2))
    assert cloud.calls["stop"] == 0
    with db.session() as s:
        kinds = [(a.kind, a.body) for a in s.exec(select(AlertRow))]
    assert [k for k, _ in kinds] == ["idle-warning", "cleared"]
    assert "last terminal input 20 s ago" in kinds[1][1]


def test_untrusted_minutes_are_no_data_for_the_stop(db: Database, db_url: str) -> None:
    clock = ManualClock(T0)
    cloud = AgentCloud(clock)
    cloud.add("i-dcgm", lambda m: "busy")
    # NVIDIA/dcgm-exporter#662: SM activity reads 0 while the GPU trains flat out
    cloud.override["i-dcgm"] = lambda m: m.model_copy(update={
        "sm_mean": 0.0, "sm_p95": 0.0, "sm_max": 0.0})
    engine = engine_for(db, db_url, cloud, clock)
    run_for(engine, clock, timedelta(hours=2))
    summary = engine.run_cycle()
    assert cloud.calls["stop"] == 0
    assert summary.held_back == {"idle-gpu": 1}
    with db.session() as s:
        assert not list(s.exec(select(AlertRow)))  # never warned
        answer = explain(s, "i-dcgm", engine.policies, PriceCatalog(), clock.now())
    reason = answer.policies[0].reasons[0]
    assert reason.startswith("not idle once untrusted signals are set aside (no-data): ")
    assert "SM activity 0% while util_gpu" in reason and "the SM counter reads 0 under load" in (
        reason)
    assert "untrusted, counted as no data" in answer.telemetry["summary"]


def test_the_checks_read_a_batch_of_instances_at_a_time_and_judge_each_alone(
        db: Database, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An hour of every stop candidate's stored readings held at once was the evaluate
    stage's peak memory: they are read `CHECK_BATCH` instances at a time, and each finding
    is still judged on its own instance's readings, whichever batch it falls in."""
    from costguard.policy import stop_check

    reads: list[int] = []
    real = stop_check.read_shaped

    def counted(session: Any, refs: Any, start: datetime, end: datetime, shape: Any) -> Any:
        reads.append(len(refs))
        return real(session, refs, start, end, shape)

    monkeypatch.setattr(stop_check, "CHECK_BATCH", 2)
    monkeypatch.setattr(stop_check, "read_shaped", counted)
    clock = ManualClock(T0)
    cloud = AgentCloud(clock)
    busy = {"i-1", "i-4"}  # in the first batch and the last
    for n in range(5):
        cloud.add(f"i-{n}", lambda m: "held_memory_idle")
        if f"i-{n}" in busy:
            cloud.hosts[f"i-{n}"] = copying
    engine = engine_for(db, db_url, cloud, clock)
    run_for(engine, clock, timedelta(hours=2))
    stopped = {i for i, inst in cloud.instances.items() if inst.state is InstanceState.STOPPED}
    assert stopped == {"i-0", "i-2", "i-3"}
    assert {s.instance_id for s in journal(db, "stop")} == stopped
    # the cycles with five candidates read them two, two and one at a time (agents, others)
    assert reads and max(reads) <= 2 and 5 not in reads
