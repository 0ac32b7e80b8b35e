from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import pytest

from costguard.actions.runner import FaultHook
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.model import GpuMinute, Instance
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from tests.fakes.cloud import T0, ScriptedCloud

IDLE_POLICY = """\
policies:
  - name: idle-gpu
    mode: {mode}
    filters: {{gpu: true, state: running}}
    condition:
      idle: {{below: 5, for: 45m}}
    actions:
      - notify: {{to: owner}}
      - stop: {{grace: 15m}}
    limits: {{max_actions_per_cycle: {cap}}}
"""

EngineFactory = Callable[..., Engine]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def cloud(clock: ManualClock) -> ScriptedCloud:
    return ScriptedCloud(clock)


@pytest.fixture
def make_engine(db: Database, cloud: ScriptedCloud, clock: ManualClock,
                db_url: str) -> EngineFactory:
    def build(policy_text: str | None = None, *, mode: str = "enforce", cap: int = 10,
              fault: FaultHook | None = None) -> Engine:
        text = policy_text or IDLE_POLICY.format(mode=mode, cap=cap)
        settings = Settings(database_url=db_url, policy_paths=[])
        return Engine(settings, db, {"sim": cloud}, parse_policy_text(text, "test.yml"), clock,
                      fault=fault)
    return build


def run_for(engine: Engine, clock: ManualClock, duration: timedelta,
            step: timedelta = timedelta(minutes=5)) -> None:
    end = clock.now() + duration
    while clock.now() < end:
        engine.run_cycle()
        clock.advance(step)


MetricsCall = tuple[list[str], datetime, datetime]


def record_metric_calls(cloud: ScriptedCloud) -> list[MetricsCall]:
    """Each `gpu_metrics` call made of `cloud` from now on: the instances asked (sorted),
    and the span."""
    calls: list[MetricsCall] = []
    inner = cloud.gpu_metrics

    def gpu_metrics(instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        calls.append((sorted(i.instance_id for i in instances), start, end))
        return inner(instances, start, end)

    cloud.gpu_metrics = gpu_metrics  # type: ignore[method-assign]
    return calls
