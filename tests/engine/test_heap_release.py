"""What a cycle freed goes back to the operating system (costguard/heap.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from costguard.heap import jemalloc_installed

ROOT = Path(__file__).resolve().parents[2]

# a child process: the suite's own heap would blur the figures
_CHILD = """
import json, sys
from costguard.heap import release_freed_memory

def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024

base = rss()
junk = [{"k%d" % k: float(k) for k in range(30)} for _ in range(200_000)]  # ~1 KB dicts
peak = rss()
keep = junk[::20_000]  # a few survivors in the heap, as a cycle leaves them
del junk
freed = rss()
trimmed = release_freed_memory()
print(json.dumps({"base": base, "peak": peak, "freed": freed, "after": rss(),
                  "trimmed": trimmed, "kept": len(keep)}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_freed_memory_leaves_the_process_once_released() -> None:
    import json

    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=120)
    got = json.loads(out.stdout)
    grown = got["peak"] - got["base"]
    assert grown > 150, got  # the dicts did take memory
    if not got["trimmed"]:
        pytest.skip("not glibc: nothing to release")
    # freeing alone leaves the dicts' pages resident (glibc keeps them); released, they go
    assert got["freed"] - got["base"] > 100, got
    assert got["after"] - got["base"] < grown / 10, got


@pytest.mark.skipif(not Path("/proc/self/status").exists() or not jemalloc_installed(),
                    reason="reads /proc; needs jemalloc (Debian: libjemalloc2)")
def test_on_jemalloc_the_cycles_free_pages_are_purged_at_once() -> None:
    """A process on jemalloc (preloaded, Python's allocator handing it everything) keeps the
    freed dicts' pages for its decay time (a minute here); released, they go now."""
    import json
    import os

    env = {**os.environ, "LD_PRELOAD": "libjemalloc.so.2", "PYTHONMALLOC": "malloc",
           "MALLOC_CONF": "dirty_decay_ms:60000,muzzy_decay_ms:60000"}
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=120, env=env)
    got = json.loads(out.stdout)
    grown = got["peak"] - got["base"]
    assert grown > 150 and got["trimmed"], got
    assert got["freed"] - got["base"] > 100, got  # freed, but kept for its decay time
    assert got["after"] - got["base"] < grown / 10, got


def test_release_purges_every_jemalloc_arena(monkeypatch: pytest.MonkeyPatch) -> None:
    from costguard import heap

    asked: list[bytes] = []

    def mallctl(name: bytes, *rest: object) -> int:
        asked.append(name)
        return 0

    monkeypatch.setattr(heap, "_jemalloc", lambda: mallctl)
    monkeypatch.setattr(heap, "_libc", lambda: pytest.fail("glibc's trim under jemalloc"))
    assert heap.release_freed_memory()
    assert asked == [b"arena.4096.purge"]  # MALLCTL_ARENAS_ALL


@pytest.mark.skipif(not jemalloc_installed(), reason="needs jemalloc (Debian: libjemalloc2)")
def test_the_images_jemalloc_settings_are_all_taken() -> None:
    """jemalloc warns on stderr of a setting it does not know, and runs on without it."""
    import os

    from costguard.heap import JEMALLOC_ENV

    child = ("import ctypes; from costguard.heap import jemalloc, limit_malloc_arenas, "
             "release_freed_memory; "
             "m = ctypes.CDLL(None).mallctl; v = ctypes.c_size_t(); "
             "n = ctypes.c_size_t(ctypes.sizeof(v)); "
             "m(b'opt.tcache_max', ctypes.byref(v), ctypes.byref(n), None, 0); "
             "print(jemalloc(), release_freed_memory(), v.value, limit_malloc_arenas())")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=60, env={**os.environ, **JEMALLOC_ENV})
    # glibc's arena limit is not asked for: jemalloc's own (narenas) decides
    assert out.stdout.split() == ["True", "True", "4096", "False"], out
    assert "<jemalloc>" not in out.stderr, out.stderr
