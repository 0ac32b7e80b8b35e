"""During a cycle the collector walks the live objects less often; outside it, as before."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from costguard import heap
from costguard.heap import CYCLE_GEN0, MALLOC_ARENAS, cycle_collection, glibc
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


_ARENAS_SCRIPT = """
import ctypes, os, sys, tempfile, threading
from costguard.heap import limit_malloc_arenas
print(limit_malloc_arenas() if sys.argv[1] == "limit" else "none")
start = threading.Barrier(9)
held = []
def work():
    start.wait()  # every thread alive at once, each allocating from malloc
    held.append([bytearray(8192) for _ in range(200)])
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
start.wait()
for t in threads:
    t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
path = os.path.join(tempfile.mkdtemp(), "info.xml")
f = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, f)
libc.fclose(f)
print(open(path).read().count("<heap nr="))
"""


def _arenas(mode: str) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", _ARENAS_SCRIPT, mode], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not glibc(), reason="malloc arenas are glibc's")
def test_threads_share_the_limited_arenas() -> None:
    """Eight threads allocating at once: glibc gives them arenas of their own (up to eight
    per core); once limited, they share `MALLOC_ARENAS`."""
    asked, unlimited = _arenas("none")
    assert unlimited > MALLOC_ARENAS
    asked, limited = _arenas("limit")
    assert asked == "True"
    assert limited <= MALLOC_ARENAS


class _Libc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def test_arenas_are_asked_once_and_never_over_the_operators_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(heap, "_arenas_asked", False)
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    libc = _Libc()
    assert heap.limit_malloc_arenas(libc=libc)
    assert not heap.limit_malloc_arenas(libc=libc)  # once per process
    assert libc.calls == [(-8, MALLOC_ARENAS)]  # M_ARENA_MAX
    monkeypatch.setattr(heap, "_arenas_asked", False)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert not heap.limit_malloc_arenas(libc=libc)
    assert libc.calls == [(-8, MALLOC_ARENAS)]


def test_the_engine_limits_arenas_before_each_cycle_starts(
    make_engine: EngineFactory, cloud: ScriptedCloud, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked at every cycle's start (the call itself acts once per process), before any
    stage's threads."""
    events: list[str] = []

    def limit() -> bool:
        events.append("limit")
        return True

    monkeypatch.setattr("costguard.engine.cycle.limit_malloc_arenas", limit)
    listing = cloud.list_instances

    def list_instances() -> Inventory:
        events.append("collect")
        return listing()

    cloud.list_instances = list_instances  # type: ignore[method-assign]
    engine = make_engine()
    engine.run_cycle()
    engine.run_cycle()
    assert events == ["limit", "collect", "limit", "collect"]


_EXIT_SCRIPT = """
import atexit, gc, sys
# registered first, so it runs last: after costguard's handler, as the log's flush would
atexit.register(lambda: print("frozen at exit", gc.get_freeze_count() > 0, flush=True))
garbage = []
for _ in range(20_000):  # reference cycles, as botocore's clients leave
    a = {}
    a["self"] = a
    garbage.append(a)
del garbage, a
from costguard.heap import skip_collection_at_exit
if sys.argv[1] == "skip":
    print(skip_collection_at_exit(), skip_collection_at_exit())
"""


@pytest.mark.parametrize("mode", ["skip", "collect"])
def test_the_heap_is_frozen_at_exit_once_asked(mode: str) -> None:
    out = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, mode], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    if mode == "skip":
        assert out == ["True False", "frozen at exit True"]  # registered once
    else:
        assert out == ["frozen at exit False"]


def test_the_engine_asks_at_every_cycle(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def skip() -> bool:
        asked.append("skip")
        return True

    monkeypatch.setattr("costguard.engine.cycle.skip_collection_at_exit", skip)
    engine = make_engine()
    engine.run_cycle()
    engine.run_cycle()
    assert asked == ["skip", "skip"]
