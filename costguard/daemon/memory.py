"""Hand memory a cycle freed back to the operating system.

A cycle builds and drops a great many small objects (a first cycle's hour of readings at
10,000 instances is over a gigabyte of them). CPython frees them, but glibc's allocator
keeps the freed pages in its heap, so the daemon's resident size stays at the cycle's peak
for good: 750 MB after one first cycle at 10,000 instances, 170 MB once trimmed.
`malloc_trim(0)` returns the free pages (glibc >= 2.8 releases whole free pages anywhere in
the heap, not only at its top); elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim: Callable[[int], int] = libc.malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]  # type: ignore[attr-defined]
    trim.restype = ctypes.c_int  # type: ignore[attr-defined]
    return trim


def release_freed_memory() -> bool:
    """Give the allocator's free pages back; True where that is possible (glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
