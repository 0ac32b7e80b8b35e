"""Readings a provider handed over before and the caller stored, so that the span a cloud's
metrics settle over (read again each cycle for late points) is not built into models,
stored and windowed again when it comes back unchanged.

A steady AWS cycle asks CloudWatch for the last 15 minutes: 5 new and 10 read again in case
a point arrived late. Most come back exactly as before, and building, storing and windowing
them again was most of a cycle's telemetry work at organisation scale. A provider keeps one
`Repeats`; each metrics call runs its readings (as field dicts, before any model is built)
through `fresh`, and the caller, once it has stored what the call returned, says so with
`stored`. Until it does, nothing counts as handed over: a call whose readings were never
stored (the store failed, the caller was not the engine) leaves the next call to return
them all again. A reading that changed in any field (a late point, a host CPU figure that
arrived) is fresh.

Only the last `horizon` (the settling span and a period) can be asked again, so only
readings that recent are remembered, and older ones pass without a look. What is kept is a
64-bit signature per reading (Python's hash of its fields, names and values), 8 bytes in a
sorted array per minute: ~4 MB for half a million readings. Two different readings with one
signature would leave the later out; with the hash's randomised seed and the few hundred
thousand readings of a settling span, the chance is below one in ten million million per
cycle.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

Fields = Mapping[str, Any]  # one reading's fields, as the provider builds them


def _has(signatures: array[int], signature: int) -> bool:
    i = bisect_left(signatures, signature)
    return i < len(signatures) and signatures[i] == signature


class Repeats:
    """The signatures of the recent readings stored, by minute."""

    def __init__(self, horizon: timedelta) -> None:
        self.horizon = horizon
        self._lock = threading.Lock()
        self._held: dict[datetime, array[int]] = {}  # sorted signatures, by minute
        self._pending: dict[datetime, array[int]] = {}
        self._newest: datetime | None = None  # the latest end any call asked for
        self._keep_from: datetime | None = None  # the pending call's oldest minute kept
        self._look_from: datetime | None = None  # ... and oldest minute looked at

    def begin(self, end: datetime) -> None:
        """A call for minutes before `end` starts: what an earlier call returned and the
        caller never confirmed is forgotten."""
        with self._lock:
            self._newest = end if self._newest is None else max(self._newest, end)
            self._keep_from = self._newest - self.horizon  # what a later call may ask again
            self._look_from = min([self._keep_from, *self._held])  # and what is held
            self._pending = {}

    def fresh(self, readings: Iterable[Fields]) -> list[Fields]:
        """The readings not handed over before unchanged (all of them until `stored` was
        called). Safe from several threads of one call."""
        out: list[Fields] = []
        seen: dict[datetime, array[int]] = {}
        held = self._held  # replaced, never changed in place, while a call runs
        keep_from, look_from = self._keep_from, self._look_from
        for fields in readings:
            minute = fields["minute"]
            if keep_from is None or look_from is None or minute < look_from:
                out.append(fields)  # not held, and older than any later call asks again
                continue
            signature = hash(tuple(fields.items()))
            if minute >= keep_from:
                bucket = seen.get(minute)
                if bucket is None:
                    bucket = seen[minute] = array("q")
                bucket.append(signature)
            known = held.get(minute)
            if known is None or not _has(known, signature):
                out.append(fields)
        with self._lock:
            for minute, signatures in seen.items():
                self._pending.setdefault(minute, array("q")).extend(signatures)
        return out

    def stored(self) -> None:
        """The caller stored what the last call returned: its readings (those left out
        included) count as handed over; those older than the horizon are dropped."""
        with self._lock:
            keep_from = self._keep_from
            if keep_from is None:
                return
            held: dict[datetime, array[int]] = {}
            for minute in self._held.keys() | self._pending.keys():
                if minute < keep_from:
                    continue
                old, new = self._held.get(minute), self._pending.get(minute)
                if new is None and old is not None:
                    held[minute] = old
                else:
                    held[minute] = array("q", sorted({*(old or ()), *(new or ())}))
            self._held, self._pending, self._keep_from = held, {}, None
            self._look_from = None

    def __len__(self) -> int:
        return sum(len(s) for s in self._held.values())
