"""The process's heap during a cycle: the cyclic garbage collector, malloc's arenas, and the
free pages a cycle leaves.

CPython looks for reference cycles every 700 net allocations of container objects, and
every 10th and 100th time through older objects too. A cycle at organisation scale
allocates tens of millions of them (instances, readings, API answers), most alive until a
stage ends: at the default thresholds the collector walked the same live objects hundreds
of times, a quarter of a steady cycle's CPU at 30,000 instances. During a cycle the
youngest generation is collected every `CYCLE_GEN0` allocations instead; the older ones keep
their ratios, so a full collection still comes after enough young ones. Garbage that is not
in a cycle is freed at once as always (reference counting): only cyclic garbage waits, at
most that many allocations. The thresholds are restored when the last cycle running ends.

glibc's malloc gives each new thread an arena of its own, up to eight per core, and keeps
what is freed in each for that arena's next allocations. A cycle's scopes are read by dozens
of threads (the providers' workers), each parsing large answers; under the GIL one of them
runs at a time, so the extra arenas bought no speed and held the freed memory of every
thread apart: at 30,000 instances a third of the peak resident size. Before its first
cycle the engine asks for `MALLOC_ARENAS` (an operator's own MALLOC_ARENA_MAX is left as
it is), and after each cycle it hands the pages the cycle freed back to the operating
system (`release_freed_memory`); elsewhere than glibc nothing changes.

What stays resident between cycles follows the cycle's peak: Python's own allocator takes
small objects from 1 MiB arenas and returns an arena only when all of it is free, and the
few objects that live on from a cycle (the reading window's, the held verdicts) are spread
through the arenas its peak filled. jemalloc keeps objects of a size together in pages and
returns every free page: a process started with it (`LD_PRELOAD=libjemalloc.so.2`) and with
Python's allocator handing everything to it (`PYTHONMALLOC=malloc`), as the image does
(deploy/Dockerfile, docs/operations.md "Sizing"), is purged of the cycle's free pages at
once after each cycle (`release_freed_memory`: jemalloc's `arena.<all>.purge`) instead of
over its decay time.

At exit CPython collects every generation again while it tears the modules down: after a
cycle that walks the process's whole heap and frees, cycle by cycle, botocore's clients and
service models, SQLAlchemy's compiled statements, the providers' caches (~0.3 s of a
one-shot `costguard run --once` at 4,000 instances, a sixth of its CPU). The memory goes
back to the operating system with the process either way: `skip_collection_at_exit`
freezes the heap in an exit handler, so teardown frees what reference counting frees and
leaves the rest to the operating system.
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

CYCLE_GEN0 = 100_000
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter (glibc's malloc.h)
_arenas_asked = False
_exit_skipped = False

_lock = threading.Lock()
_running = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def cycle_collection(gen0: int = CYCLE_GEN0) -> Iterator[None]:
    """Collect the youngest generation every `gen0` allocations (never more often than it
    was) while any cycle runs, or other bulk work that keeps many objects alive at once (a
    week of readings judged: recommend/run.py `judge_instances`)."""
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


@cache
def _libc() -> Any:
    """The process's C library where it is glibc (mallopt, malloc_trim), else None."""
    try:
        if os.confstr("CS_GNU_LIBC_VERSION") is None:
            return None
    except (ValueError, OSError, AttributeError):  # no such name here: not glibc
        return None
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def glibc() -> bool:
    """Whether this process's C library is glibc."""
    return _libc() is not None


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS, *, libc: Any = None) -> bool:
    """Ask glibc for at most `arenas` malloc arenas, once per process; True when this call
    set it. Not when MALLOC_ARENA_MAX is in the environment (glibc read it at start), nor
    elsewhere than glibc, nor on jemalloc. `libc`: the C library to call (the process's own
    by default)."""
    global _arenas_asked
    with _lock:
        if _arenas_asked:
            return False
        _arenas_asked = True
    libc = libc if libc is not None else _libc()
    if "MALLOC_ARENA_MAX" in os.environ or libc is None or _jemalloc() is not None:
        return False  # on jemalloc its own setting (narenas) decides, read at start
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


@cache
def _jemalloc() -> Any:
    """jemalloc's `mallctl` where the process runs on jemalloc (preloaded), else None."""
    import ctypes

    try:
        mallctl = ctypes.CDLL(None).mallctl
    except (AttributeError, OSError):  # not loaded, or no symbol table to look in
        return None
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                        ctypes.c_size_t]
    mallctl.restype = ctypes.c_int
    return mallctl


def jemalloc() -> bool:
    """Whether this process allocates with jemalloc."""
    return _jemalloc() is not None


def jemalloc_installed() -> bool:
    """Whether jemalloc can be preloaded here (`JEMALLOC_ENV`), loaded in this process or not."""
    import ctypes.util

    return ctypes.util.find_library("jemalloc") is not None


# every arena at once (jemalloc's MALLCTL_ARENAS_ALL)
_PURGE_ALL = b"arena.4096.purge"

# How the image runs the daemon on jemalloc (deploy/Dockerfile sets these; a test keeps the
# two equal): Python's allocator hands it every object; two arenas, as glibc gets; a free
# page back at once (freed pages held for jemalloc's decay time, even 1 s, raised the peak
# of the hourly prune by 9 %), and after each cycle whatever is left
# (`release_freed_memory`); each thread's cache small (20 objects a size, none over 4 KiB):
# with jemalloc's default caches, the dozens of provider threads' raised a cycle's peak by
# ~13 % (docs/operations.md "Sizing").
JEMALLOC_ENV = {
    "LD_PRELOAD": "libjemalloc.so.2",
    "PYTHONMALLOC": "malloc",
    "MALLOC_CONF": "narenas:2,background_thread:true,dirty_decay_ms:0,muzzy_decay_ms:0,"
                   "tcache_nslots_small_max:20,tcache_max:4096",
}


def release_freed_memory() -> bool:
    """Give the allocator's free pages back to the operating system; True where that is
    possible (jemalloc, glibc). A cycle frees most of what it built, but glibc keeps freed
    pages in its heap, so the process would stay at the cycle's peak for good (750 MB after
    a first cycle at 10,000 instances, 170 MB once trimmed); `malloc_trim(0)` releases whole
    free pages anywhere in the heap (glibc >= 2.8). jemalloc returns free pages by itself
    over its decay time; purged, they go now. Elsewhere (musl, macOS) this does nothing."""
    mallctl = _jemalloc()
    if mallctl is not None:
        return bool(mallctl(_PURGE_ALL, None, None, None, 0) == 0)
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def skip_collection_at_exit() -> bool:
    """Once per process: freeze the collector's heap at exit (`gc.freeze` as an exit
    handler), so the interpreter's teardown does not walk and free it cycle by cycle; True
    when this call registered it. Exit handlers registered before it (the log's flush, the
    store's) still run after it, and whatever reference counting frees is still freed;
    objects left in reference cycles are not finalized at exit, which CPython does not
    promise anyway."""
    global _exit_skipped
    with _lock:
        if _exit_skipped:
            return False
        _exit_skipped = True
    atexit.register(gc.freeze)
    return True
