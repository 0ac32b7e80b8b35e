"""The batched act path (a provider with describe_many / stop_many / set_tags_many) keeps the
per-instance path's guarantees: a crash after the intents or after the call neither repeats a
stop nor loses its trace, many instances cost one call per cycle, and an instance protected
is left alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import timedelta

import pytest
from sqlmodel import select

from costguard.actions.batch import batch_capable
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.model import ActionResult, Instance, InstanceState
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow
from tests.engine.conftest import IDLE_POLICY, run_for
from tests.fakes.cloud import BatchCloud, ScriptedCloud, always

TAGGING = """\
policies:
  - name: idle-gpu
    mode: enforce
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - tag: {set: {"costguard:idle-since": "{now}"}}
      - stop: {grace: 15m}
    limits: {max_actions_per_cycle: 10}
"""


class Crash(BaseException):
    """Stands for the process dying: not an Exception, so nothing catches it."""


def _engine(db: Database, cloud: ScriptedCloud, clock: ManualClock, db_url: str,
            text: str, point: str | None = None) -> Engine:
    def fault(at: str) -> None:
        if at == point:
            raise Crash(at)

    settings = Settings(database_url=db_url, policy_paths=[])
    return Engine(settings, db, {"sim": cloud}, parse_policy_text(text, "test.yml"), clock,
                  fault=fault)


@pytest.fixture
def batch_cloud(clock: ManualClock) -> BatchCloud:
    cloud = BatchCloud(clock)
    assert batch_capable(cloud)
    return cloud


@pytest.mark.parametrize("point", ["after-intent", "after-call"])
def test_crash_in_a_batched_stop_does_not_repeat_it(
    point: str, batch_cloud: BatchCloud, clock: ManualClock, db: Database, db_url: str
) -> None:
    for n in range(3):
        batch_cloud.add(f"i-idle{n}", always("no_process"))
    text = IDLE_POLICY.format(mode="enforce", cap=10)
    with pytest.raises(Crash):
        run_for(_engine(db, batch_cloud, clock, db_url, text, point), clock, timedelta(hours=1))
    with db.session() as s:
        pending = list(s.exec(select(ActionJournalRow).where(ActionJournalRow.status == "intent")))
    assert len(pending) == 3  # every intent of the batch was committed before the call
    assert batch_cloud.calls["stop"] == (3 if point == "after-call" else 0)

    clock.advance(timedelta(minutes=5))
    run_for(_engine(db, batch_cloud, clock, db_url, text), clock, timedelta(hours=1))

    assert batch_cloud.calls["stop"] == 3  # each instance stopped exactly once in all
    assert all(i.state is InstanceState.STOPPED for i in batch_cloud.instances.values())
    with db.session() as s:
        stops = list(s.exec(select(ActionJournalRow).where(ActionJournalRow.action == "stop")))
    assert all(j.status != "intent" for j in stops)
    assert [j.status for j in stops].count("done") == 3


def test_a_batch_costs_one_call_per_stage_and_leaves_a_protected_one(
    batch_cloud: BatchCloud, clock: ManualClock, db: Database, db_url: str
) -> None:
    for n in range(5):
        batch_cloud.add(f"i-idle{n}", always("no_process"))
    engine = _engine(db, batch_cloud, clock, db_url, TAGGING)
    # the cycle that warns (and tags), then protect one instance during the grace period
    for _ in range(30):
        engine.run_cycle()
        clock.advance(timedelta(minutes=5))
        if batch_cloud.calls["tags_many"]:
            break
    assert batch_cloud.calls["tags_many"] == 1 and batch_cloud.calls["tags"] == 5
    assert batch_cloud.calls["stop"] == 0
    live = batch_cloud.instances["i-idle0"]
    batch_cloud.instances["i-idle0"] = live.model_copy(
        update={"tags": {**live.tags, "costguard:protect": "true"}})
    run_for(engine, clock, timedelta(minutes=30))

    assert batch_cloud.calls["stop_many"] == 1  # four stops, one call
    assert batch_cloud.calls["stop"] == 4
    assert batch_cloud.instances["i-idle0"].state is InstanceState.RUNNING
    with db.session() as s:
        tags = list(s.exec(select(ActionJournalRow).where(ActionJournalRow.action == "tag")))
    assert sorted(j.status for j in tags) == ["done"] * 5


class ScopedBatchCloud(BatchCloud):
    """BatchCloud whose instances live in several regions, whose batch calls take a while,
    and which says how many scopes the act stage may call at once (`scope_workers`)."""

    def __init__(self, clock: ManualClock, workers: int | None) -> None:
        super().__init__(clock)
        if workers is not None:
            self.scope_workers = workers
        self._lock = threading.Lock()
        self._in_flight = 0
        self.most_in_flight = 0
        self.regions_called: list[str] = []

    def _call(self, instances: Sequence[Instance]) -> None:
        with self._lock:
            self._in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self._in_flight)
            self.regions_called.append(instances[0].region)
        time.sleep(0.05)  # a cloud API's round trip
        with self._lock:
            self._in_flight -= 1

    def describe_many(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
        self._call(instances)
        return super().describe_many(instances)

    def stop_many(self, instances: Sequence[Instance], *, dry_run: bool
                  ) -> dict[str, ActionResult]:
        self._call(instances)
        return super().stop_many(instances, dry_run=dry_run)


@pytest.mark.parametrize("workers", [None, 4])
def test_scopes_are_called_concurrently_up_to_the_providers_workers(
    workers: int | None, clock: ManualClock, db: Database, db_url: str
) -> None:
    cloud = ScopedBatchCloud(clock, workers)
    regions = ["us-east-1", "us-west-2", "eu-west-1", "ap-south-1", "sa-east-1", "eu-north-1"]
    for n, region in enumerate(regions):
        inst = cloud.add(f"i-idle{n}", always("no_process"))
        cloud.instances[inst.instance_id] = inst.model_copy(update={"region": region})
    text = IDLE_POLICY.format(mode="enforce", cap=10)
    run_for(_engine(db, cloud, clock, db_url, text), clock, timedelta(hours=1))

    assert all(i.state is InstanceState.STOPPED for i in cloud.instances.values())
    assert cloud.calls["describe_many"] == cloud.calls["stop_many"] == len(regions)
    assert sorted(cloud.regions_called) == sorted(regions * 2)  # one scope per call
    if workers is None:  # a provider that says nothing: one scope at a time, as before
        assert cloud.most_in_flight == 1
    else:
        assert 1 < cloud.most_in_flight <= workers
