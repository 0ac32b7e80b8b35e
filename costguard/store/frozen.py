"""A run of the reading window's packed records kept compressed (`store/packed.py` `Rows`).

The window holds an hour or so of every GPU's readings, packed 18 or 46 bytes each; it is
the largest thing a daemon holds between cycles (~38 MB of the simulated 10,000-instance
fleet's). Readings older than the last quarter hour are no longer read again from their
cloud (CloudWatch's settling span is 10 minutes, the agent's late span 5): `Rows` moves
each such quarter hour of an instance's into a frozen chunk, a header and one zstd frame of
the records as they were packed. A chunk is never edited: it is dropped whole once every
reading in it ends before the window (as the window keeps what has left it a while), and
a later copy of a frozen reading (a catch-up) is held after it, where a later copy wins as
it always does (the next compact merges them). The idle verdict reads the whole hour once
a cycle: decompressing a quarter hour of a GPU's readings costs ~3 µs.

A chunk's header says how many records it holds, the earliest and latest minute among
them and the latest end of one (minute plus span), epoch seconds: what a view or a compact
needs to skip or drop it without decompressing it.
"""

from __future__ import annotations

import struct
import threading
from typing import NamedTuple

import zstandard

# records; earliest minute, latest minute, latest end (minute + span), epoch seconds
_HEAD = struct.Struct("<IIII")
_LEVEL = 3
_codecs = threading.local()  # zstd contexts are not shared between threads


class Head(NamedTuple):
    """What a frozen chunk holds, read without decompressing it."""

    records: int
    first: int  # the earliest minute, epoch seconds
    last: int  # the latest minute
    end: int  # the latest end: minute + span


def freeze(records: bytes, head: Head) -> bytes:
    """`records` (packed, of one width) as a frozen chunk that `head` describes."""
    compressor = getattr(_codecs, "compressor", None)
    if compressor is None:
        compressor = _codecs.compressor = zstandard.ZstdCompressor(level=_LEVEL)
    return _HEAD.pack(*head) + compressor.compress(records)


def head_of(chunk: bytes) -> Head:
    """The chunk's header."""
    return Head._make(_HEAD.unpack_from(chunk))


def thaw(chunk: bytes) -> bytes:
    """The packed records a chunk holds, as they were frozen."""
    decompressor = getattr(_codecs, "decompressor", None)
    if decompressor is None:
        decompressor = _codecs.decompressor = zstandard.ZstdDecompressor()
    out: bytes = decompressor.decompress(memoryview(chunk)[_HEAD.size:])
    return out
