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

What is kept is a 64-bit signature per reading (Python's hash of its fields, names and
values), not the reading: ~60 bytes each. Two different readings with one signature would
leave the later out; with the hash's randomised seed and the few hundred thousand readings
of a settling span, the chance is below one in ten million million per cycle.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

Fields = Mapping[str, Any]  # one reading's fields, as the provider builds them


class Repeats:
    """The signatures of readings stored since the start of the last settling span."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[datetime, set[int]] = {}  # by the reading's minute
        self._pending: dict[datetime, set[int]] = {}
        self._first: datetime | None = None  # the pending call's first minute

    def begin(self, first: datetime) -> None:
        """A call for minutes from `first` on starts: what an earlier call returned and the
        caller never confirmed is forgotten."""
        with self._lock:
            self._pending, self._first = {}, first

    def fresh(self, readings: Iterable[Fields]) -> list[Fields]:
        """The readings not handed over before unchanged (all of them until `stored` was
        called). Safe from several threads of one call."""
        out: list[Fields] = []
        seen: dict[datetime, set[int]] = {}
        held = self._held  # replaced, never changed in place, while a call runs
        for fields in readings:
            minute = fields["minute"]
            signature = hash(tuple(fields.items()))
            bucket = seen.get(minute)
            if bucket is None:
                bucket = seen[minute] = set()
            bucket.add(signature)
            if signature not in held.get(minute, ()):
                out.append(fields)
        with self._lock:
            for minute, signatures in seen.items():
                self._pending.setdefault(minute, set()).update(signatures)
        return out

    def stored(self) -> None:
        """The caller stored what the last call returned: its readings (those left out
        included) count as handed over; those before its first minute are dropped."""
        with self._lock:
            if self._first is None:
                return
            first = self._first
            held = {m: s for m, s in self._held.items() if m >= first}
            for minute, signatures in self._pending.items():
                if minute in held:
                    held[minute] = held[minute] | signatures
                else:
                    held[minute] = signatures
            self._held, self._pending, self._first = held, {}, None

    def __len__(self) -> int:
        return sum(len(s) for s in self._held.values())
