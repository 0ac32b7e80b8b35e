"""During a cycle the collector walks the live objects less often; outside it, as before."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from costguard.engine.heap import CYCLE_GEN0, cycle_collection
from costguard.model import Inventory
from tests.engine.conftest import EngineFactory
from tests.fakes.cloud import ScriptedCloud


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_thresholds_are_raised_while_any_cycle_runs_and_restored_after() -> None:
    with cycle_collection():
        assert gc.get_threshold() == (CYCLE_GEN0, 10, 10)
        with cycle_collection():  # a second cycle (another engine in the process)
            assert gc.get_threshold() == (CYCLE_GEN0, 10, 10)
        assert gc.get_threshold() == (CYCLE_GEN0, 10, 10)  # the first still runs
    assert gc.get_threshold() == (700, 10, 10)
    with pytest.raises(RuntimeError), cycle_collection():
        raise RuntimeError("a stage failed")
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_set_by_the_process_is_kept() -> None:
    gc.set_threshold(250_000, 20, 5)
    with cycle_collection():
        assert gc.get_threshold() == (250_000, 20, 5)
    assert gc.get_threshold() == (250_000, 20, 5)


def test_cycles_in_threads_restore_once_the_last_one_ends() -> None:
    inside, release = threading.Barrier(3), threading.Event()

    def cycle() -> None:
        with cycle_collection():
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=cycle) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    assert gc.get_threshold()[0] == CYCLE_GEN0
    release.set()
    for t in threads:
        t.join()
    assert gc.get_threshold() == (700, 10, 10)


def test_the_engine_runs_each_cycle_under_it(make_engine: EngineFactory,
                                             cloud: ScriptedCloud) -> None:
    seen: list[tuple[int, int, int]] = []
    listing = cloud.list_instances

    def list_instances() -> Inventory:
        seen.append(gc.get_threshold())
        return listing()

    cloud.list_instances = list_instances  # type: ignore[method-assign]
    engine = make_engine()
    engine.run_cycle()
    assert seen == [(CYCLE_GEN0, 10, 10)]
    assert gc.get_threshold() == (700, 10, 10)
