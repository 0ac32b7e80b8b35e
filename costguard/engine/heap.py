"""The cyclic garbage collector during a cycle.

CPython looks for reference cycles every 700 net allocations of container objects, and
every 10th and 100th time through older objects too. A cycle at organisation scale
allocates tens of millions of them (instances, readings, API answers), most alive until a
stage ends: at the default thresholds the collector walked the same live objects hundreds
of times, a quarter of a steady cycle's CPU at 30,000 instances. During a cycle the
youngest generation is collected every `CYCLE_GEN0` allocations instead; the older ones keep
their ratios, so a full collection still comes after enough young ones. Garbage that is not
in a cycle is freed at once as always (reference counting): only cyclic garbage waits, at
most that many allocations. The thresholds are restored when the last cycle running ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

CYCLE_GEN0 = 100_000

_lock = threading.Lock()
_running = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def cycle_collection(gen0: int = CYCLE_GEN0) -> Iterator[None]:
    """Collect the youngest generation every `gen0` allocations (never more often than it
    was) while any cycle runs."""
    global _running, _saved
    with _lock:
        if _running == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(max(gen0, _saved[0]), *_saved[1:])
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
