"""What a cycle read of the fleet is let go when it ends: the engine and its act stage's
runner hold no instance model between cycles (each cycle reads the inventory anew; held, a
fleet's models pinned the memory the cycle freed around them, costguard/heap.py). Here, beside
the act stage's other tests, so that the runner's mutants meet it (scripts/mutation.py)."""

from __future__ import annotations

import gc
import sys
import types
from datetime import timedelta

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.model import Instance
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from tests.engine.conftest import IDLE_POLICY
from tests.fakes.cloud import ScriptedCloud, always


def held_instances(root: object, *, skip: tuple[object, ...]) -> list[Instance]:
    """Every `Instance` reachable from `root`, not through `skip` (the cloud, which keeps
    its own), modules, classes or functions' globals."""
    modules = {id(m.__dict__) for m in list(sys.modules.values()) if m is not None}
    stop = {id(o) for o in skip} | modules
    seen: set[int] = set()
    found: list[Instance] = []
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or id(obj) in stop:
            continue
        seen.add(id(obj))
        if isinstance(obj, Instance):
            found.append(obj)
        if isinstance(obj, (type, types.ModuleType)):
            continue
        todo.extend(gc.get_referents(obj))
    return found


def test_the_engine_holds_no_instance_between_cycles(
    db: Database, db_url: str, cloud: ScriptedCloud, clock: ManualClock, made: list[Engine],
) -> None:
    # the cloud can describe: the act stage re-checks (and keeps) what it is about to stop
    for n in range(2):
        cloud.add(f"i-idle-{n}", always("held_memory_idle"))
    cloud.add("i-busy", always("busy"))
    engine = Engine(Settings(database_url=db_url, policy_paths=[]), db, {"sim": cloud},
                    parse_policy_text(IDLE_POLICY.format(mode="enforce", cap=10), "test.yml"),
                    clock)
    made.append(engine)
    for _ in range(12):  # an hour: warned, re-checked and stopped, then nothing to do
        engine.run_cycle()
        assert held_instances(engine, skip=(cloud,)) == []
        # emptied, not dropped: the act stage's parts may run between cycles (after-stop)
        assert engine.runner._changed_at == {}
        live = cloud.instances["i-busy"]
        assert engine.runner.rechecks.recent([live]) == ({}, [live])
        clock.advance(timedelta(minutes=5))
    assert sorted(cloud.acted_on) == [("stop", "i-idle-0"), ("stop", "i-idle-1")]
    assert cloud.calls["describe"] > 0
