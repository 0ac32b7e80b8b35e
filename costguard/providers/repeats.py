"""Readings a provider handed over before and the caller stored, so that the span a cloud's
metrics settle over (read again each cycle for late points) is not checked, stored and
windowed again when it comes back unchanged.

A steady AWS cycle asks CloudWatch for the last 15 minutes: 5 new and 10 read again in case
a point arrived late. Most come back exactly as before, and building, storing and windowing
them again was most of a cycle's telemetry work at organisation scale. A provider keeps one
`Repeats`; each metrics call begins with `begin`, which gives it a `Receipt`, runs its
readings (as rows, `costguard.minute_rows`, before they are checked) through the receipt's
`fresh`, and returns them with the receipt (`costguard.providers.base.Readings`). The
caller, once it has stored what the call returned, hands them back (the provider's
`readings_stored`, then `stored`). Until it does, nothing of that call counts as handed
over: a call whose readings were never stored (the store failed, the caller was not the
engine) leaves the next call to return them all again. Calls may overlap (the engine asks
for the next chunk of a fleet while it stores the last one): each receipt holds only its own
call's readings. A reading that changed in any field (a late point, a host CPU figure that
arrived) is fresh.

Only the last `horizon` (the settling span and a period) can be asked again, so only
readings that recent are remembered, and older ones pass without a look. What is kept, per
instance, is a sorted array of 64-bit signatures (Python's hash of a reading's row: its
values, in the order of the call's field names): 8 bytes a reading, ~10 MB for 60,000 GPU
instances. A later call's readings of an instance replace what was kept of it; an instance
no call asked about within the horizon is forgotten. Two different readings with one
signature would leave the later out; with the hash's randomised seed and the few hundred
thousand readings of a settling span, the chance is below one in ten million million per
cycle.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from costguard.minute_rows import INSTANCE, MINUTE

Row = tuple[Any, ...]  # one reading's values, as the provider builds them (`minute_rows`)


def _has(signatures: array[int], signature: int) -> bool:
    i = bisect_left(signatures, signature)
    return i < len(signatures) and signatures[i] == signature


class Receipt:
    """One metrics call: what it may leave out (what was kept when it began, and from which
    minute on) and the signatures of the recent readings it saw, by instance."""

    __slots__ = ("held", "keep_from", "lock", "look_from", "seen")

    def __init__(self, held: dict[str, tuple[datetime, array[int]]], keep_from: datetime,
                 look_from: datetime) -> None:
        self.held = held  # replaced in `Repeats`, never changed in place
        self.keep_from = keep_from  # the oldest minute a later call may ask again
        self.look_from = look_from  # the oldest minute looked up in `held`
        self.seen: dict[str, array[int]] = {}
        self.lock = threading.Lock()  # the threads of one call

    def fresh(self, readings: Iterable[Row]) -> list[Row]:
        """The readings not handed over before unchanged (all of them until a call's
        `Repeats.stored`). Safe from several threads of this call, and beside other
        calls."""
        out: list[Row] = []
        seen: dict[str, array[int]] = {}
        held, keep_from, look_from = self.held, self.keep_from, self.look_from
        for row in readings:
            minute = row[MINUTE]
            if minute < look_from:
                out.append(row)  # not held, and older than any later call asks again
                continue
            signature = hash(row)
            instance_id = row[INSTANCE]
            if minute >= keep_from:
                mine = seen.get(instance_id)
                if mine is None:
                    mine = seen[instance_id] = array("q")
                mine.append(signature)
            kept = held.get(instance_id)
            if kept is None or not _has(kept[1], signature):
                out.append(row)
        with self.lock:
            for instance_id, signatures in seen.items():
                self.seen.setdefault(instance_id, array("q")).extend(signatures)
        return out


class Repeats:
    """The signatures of each instance's recent readings that were stored."""

    def __init__(self, horizon: timedelta) -> None:
        self.horizon = horizon
        self._lock = threading.Lock()
        # instance id -> (the latest end asked for when a call confirmed it, sorted signatures)
        self._held: dict[str, tuple[datetime, array[int]]] = {}
        self._newest: datetime | None = None  # the latest end any call asked for
        self._oldest: datetime | None = None  # the earliest end among `_held`'s

    def begin(self, end: datetime) -> Receipt:
        """A call for minutes before `end` starts: its receipt (`Receipt.fresh`)."""
        with self._lock:
            before = self._newest
            self._newest = newest = end if before is None else max(before, end)
            keep_from = newest - self.horizon  # what a later call may ask again
            if before is not None and newest > before and self._held:
                # a new cycle: instances no call asked about within the horizon go
                self._held = {i: kept for i, kept in self._held.items()
                              if kept[0] > keep_from}
                self._oldest = min((kept[0] for kept in self._held.values()), default=None)
            # what is held goes back to its oldest confirming call's horizon
            look_from = (keep_from if self._oldest is None
                         else min(keep_from, self._oldest - self.horizon))
            return Receipt(self._held, keep_from, look_from)

    def stored(self, receipt: Receipt | None) -> None:
        """The caller stored what the receipt's call returned: its readings (those left out
        included) count as handed over, in place of what was kept of their instances.
        Confirming a receipt twice, or None, changes nothing."""
        if receipt is None:
            return
        with receipt.lock:
            seen, receipt.seen = receipt.seen, {}
        with self._lock:
            if self._newest is None or not seen:
                return
            held = dict(self._held)
            for instance_id, signatures in seen.items():
                held[instance_id] = (self._newest, array("q", sorted(signatures)))
            self._held = held
            if self._oldest is None:  # the others are older than the newest end
                self._oldest = self._newest

    def __len__(self) -> int:
        return sum(len(kept[1]) for kept in self._held.values())
