"""Safety properties over generated fleets, policies and timelines (hypothesis).

Each example runs the real Engine (collect -> telemetry -> evaluate -> act) for an hour of
10-minute cycles over an in-memory SQLite store and a small in-test cloud.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costguard.actions.settings import SafetySettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from tests.fakes.cloud import BUSY, DARK, IDLE, OWNER_TAGS, PRICE, T0, ScriptedCloud, full_cloud
from tests.fakes.scenario import journal, run_for

PROPS = settings(max_examples=12, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Box:
    busy: bool | None  # None: no telemetry at all
    protected: bool
    snooze_minutes: int | None
    gpus: int


boxes = st.builds(Box, busy=st.sampled_from([False, False, True, None]),
                  protected=st.booleans(),
                  snooze_minutes=st.one_of(st.none(), st.integers(10, 120)),
                  gpus=st.integers(1, 4))


def _policy(mode: str, max_actions: int, max_usd: float | None, name: str = "idle") -> str:
    usd = f", max_usd_per_hour: {max_usd}" if max_usd is not None else ""
    return f"""\
  - name: {name}
    mode: {mode}
    filters: {{gpu: true, state: running}}
    condition:
      idle: {{below: 5, for: 45m}}
    actions:
      - notify: {{to: owner}}
      - tag: {{set: {{"costguard:idle-since": "{{now}}"}}}}
      - stop: {{grace: 15m}}
    limits: {{max_actions_per_cycle: {max_actions}{usd}}}
"""


def _fleet(fleet: list[Box]) -> ScriptedCloud:
    cloud = full_cloud(ManualClock(T0))
    for i, box in enumerate(fleet):
        tags = dict(OWNER_TAGS)
        if box.protected:
            tags["costguard:protect"] = "true"
        if box.snooze_minutes is not None:
            tags["costguard:snooze-until"] = (
                T0 + timedelta(minutes=box.snooze_minutes)).isoformat()
        phase = DARK if box.busy is None else BUSY if box.busy else IDLE
        cloud.add(f"i-{i}", phase, tags=tags, gpus=box.gpus)
    return cloud


def _engine(cloud: ScriptedCloud, policy_text: str, safety: SafetySettings | None = None) -> Engine:
    engine = Engine(Settings(), Database("sqlite://"), {"sim": cloud},
                    parse_policy_text("policies:\n" + policy_text), cloud.clock,
                    alert_printer=lambda kind, subject, body: None)
    if safety is not None:
        engine.runner.safety = safety
    return engine


@PROPS
@given(fleet=st.lists(boxes, min_size=1, max_size=5), max_actions=st.integers(1, 6),
       max_usd=st.one_of(st.none(), st.sampled_from([4.0, 9.0, 30.0])))
def test_enforced_policy_never_touches_protected_dark_or_snoozed_boxes_nor_exceeds_caps(
        fleet: list[Box], max_actions: int, max_usd: float | None) -> None:
    cloud = _fleet(fleet)
    engine = _engine(cloud, _policy("enforce", max_actions, max_usd))
    run_for(engine, cloud.clock, timedelta(hours=1, minutes=20), step=timedelta(minutes=10))
    per_cycle: dict[int | None, list[float]] = defaultdict(list)
    for j in journal(engine.db):
        box = fleet[int(j.instance_id.removeprefix("i-"))]
        acted = j.status == "done" and j.action in ("stop", "tag")
        if box.protected or box.busy is None:
            assert not acted, f"{j.action} on a {'protected' if box.protected else 'dark'} box"
        if acted and box.snooze_minutes is not None:
            assert j.intent_at >= T0 + timedelta(minutes=box.snooze_minutes)
        if j.action == "stop" and j.status == "done":
            per_cycle[j.cycle_id].append(j.usd_per_hour)
    for stops in per_cycle.values():
        assert len(stops) <= max_actions
        assert max_usd is None or sum(stops) <= max_usd
    for i, box in enumerate(fleet):
        if box.protected or box.busy is not False:
            assert cloud.instances[f"i-{i}"].state == "running"


@PROPS
@given(fleet=st.lists(boxes, min_size=1, max_size=5))
def test_dry_run_policy_changes_nothing_anywhere(fleet: list[Box]) -> None:
    cloud = _fleet(fleet)
    before = dict(cloud.instances)
    engine = _engine(cloud, _policy("dry-run", 10, None))
    run_for(engine, cloud.clock, timedelta(hours=1), step=timedelta(minutes=10))
    for iid, inst in before.items():
        now = cloud.instances[iid]
        assert (now.state, now.tags) == (inst.state, inst.tags)
    assert all(j.dry_run and j.status != "done" for j in journal(engine.db)
               if j.action in ("stop", "tag"))


@PROPS
@given(idle_boxes=st.integers(1, 8), fleet_cap=st.integers(0, 5),
       usd_cap=st.one_of(st.none(), st.sampled_from([5.0, 13.0])))
def test_fleet_wide_cap_holds_across_policies(idle_boxes: int, fleet_cap: int,
                                              usd_cap: float | None) -> None:
    cloud = full_cloud(ManualClock(T0))
    for i in range(idle_boxes):
        cloud.add(f"i-{i}", tags={**OWNER_TAGS, "pool": "a" if i % 2 else "b"})
    text = (_policy("enforce", 10, None, "idle-a").replace(
                "state: running}", "state: running, tags: {values: {pool: [a]}}}")
            + _policy("enforce", 10, None, "idle-b").replace(
                "state: running}", "state: running, tags: {values: {pool: [b]}}}"))
    engine = _engine(cloud, text, SafetySettings(max_actions_per_cycle=fleet_cap,
                                                 max_usd_per_hour_per_cycle=usd_cap))
    run_for(engine, cloud.clock, timedelta(hours=1), step=timedelta(minutes=10))
    per_cycle: dict[int | None, list[float]] = defaultdict(list)
    for j in journal(engine.db):
        if j.action == "stop" and j.status == "done":
            per_cycle[j.cycle_id].append(j.usd_per_hour)
    for stops in per_cycle.values():
        assert len(stops) <= fleet_cap
        assert usd_cap is None or sum(stops) <= usd_cap
    stopped = sum(len(v) for v in per_cycle.values())
    assert stopped == sum(1 for i in cloud.instances.values() if i.state == "stopped")
    if fleet_cap >= idle_boxes and (usd_cap is None or usd_cap >= PRICE * idle_boxes):
        assert stopped == idle_boxes  # the caps are not what stops the fleet
