"""Which bill lines were imported: each line's 64-bit key, kept per source and day as
blobs of keys (`billing_line_keys`), and read back a day at a time into a set while a file
is imported.

A line is a key in a set, not a row: stored one row a line, writing the keys cost more
than everything else an import does. A bill's lines come about in time order, so an import
holds the sets of a few days at once; a day it has not seen is read when its first line
comes (nothing, for a day never imported), and the keys an import adds are written as one
more blob of the day when the import ends or the day is let go.

An export delivered again with restated lines (AWS and Azure rewrite a month-to-date export
every day; a Savings Plan or a correction changes lines already delivered) is imported with
`Replacing`: the first time a day of the source comes, what earlier imports stored for it
(its sums and its keys) is removed, so the day holds this delivery's lines only.
"""

from __future__ import annotations

import sys
from array import array
from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import Table, delete, func, insert, select
from sqlmodel import Session

from costguard.store.bill_tables import BillingCostRow, BillingLineKeyRow

_T: Table = BillingLineKeyRow.__table__  # type: ignore[attr-defined]
_COSTS: Table = BillingCostRow.__table__  # type: ignore[attr-defined]
HELD_DAYS = 3  # days whose keys an import holds at once (a file out of time order reloads)


@dataclass
class Replacing:
    """The days an import replaces (`billing import --replace`), shared by the files of one
    delivery (a CUR's parts): a day is emptied the first time any of them has a line of it,
    and the next part adds to what the first put there."""

    days: set[tuple[str, int]] = field(default_factory=set)  # (source, day) emptied
    lines: int = 0  # what the emptied days held before
    billed_micros: int = 0

    def empty(self, session: Session, source: str, day: int) -> bool:
        """Remove what earlier imports stored for `source`'s `day`, once per import;
        whether it did (the day then has no keys to read back)."""
        if (source, day) in self.days:
            return False
        self.days.add((source, day))
        where = (_COSTS.c.source == source, _COSTS.c.day == day)
        lines, billed = session.execute(select(
            func.coalesce(func.sum(_COSTS.c.lines), 0),
            func.coalesce(func.sum(_COSTS.c.billed_micros), 0)).where(*where)).one()
        self.lines += int(lines)
        self.billed_micros += int(billed)
        session.execute(delete(_COSTS).where(*where))
        session.execute(delete(_T).where(_T.c.source == source, _T.c.day == day))
        return True

    def copy(self) -> Replacing:
        return Replacing(set(self.days), self.lines, self.billed_micros)

    def restore(self, earlier: Replacing) -> None:
        """Back to `earlier` (a copy), as a rolled-back savepoint puts the days back."""
        self.days, self.lines, self.billed_micros = (set(earlier.days), earlier.lines,
                                                     earlier.billed_micros)


class LineKeys:
    """The imported lines of one source, for one import (one transaction); with
    `replacing`, each day's earlier lines are removed when its first line comes."""

    def __init__(self, session: Session, source: str,
                 replacing: Replacing | None = None) -> None:
        self.session, self.source, self.replacing = session, source, replacing
        self.days: OrderedDict[int, set[int]] = OrderedDict()
        self.chunks: dict[int, int] = {}  # chunks stored per held day: the next one's number
        self.added: defaultdict[int, list[int]] = defaultdict(list)  # not yet written

    def add(self, days: Sequence[int], keys: Sequence[int]) -> list[bool]:
        """Record each of `keys` under its day in `days`; for each, whether it was imported
        already (by an earlier import, or earlier in this one: a key given twice is known
        the second time)."""
        if len(days) != len(keys):
            raise ValueError(f"{len(days)} days for {len(keys)} keys")
        by_day: dict[int, Sequence[int]]
        if days and days.count(days[0]) == len(days):  # a batch of one day: no grouping
            by_day = {days[0]: range(len(days))}
        else:
            grouped: defaultdict[int, list[int]] = defaultdict(list)
            for i, day in enumerate(days):
                grouped[day].append(i)
            by_day = dict(grouped)
        known = [False] * len(keys)
        for day, places in by_day.items():
            held = self._day(day)
            day_keys = keys if len(places) == len(keys) else [keys[i] for i in places]
            fresh = set(day_keys)
            if len(fresh) == len(day_keys) and held.isdisjoint(fresh):  # the usual case
                held |= fresh
                self.added[day] += day_keys
                continue
            for i, key in zip(places, day_keys, strict=True):
                if key in held:
                    known[i] = True
                else:
                    held.add(key)
                    self.added[day].append(key)
        return known

    def finish(self) -> None:
        """Write the keys added (at the end of the import)."""
        for day in list(self.added):
            self._write(day)

    def _day(self, day: int) -> set[int]:
        known = self.days.get(day)
        if known is not None:
            self.days.move_to_end(day)
            return known
        if len(self.days) >= HELD_DAYS:
            oldest, _ = self.days.popitem(last=False)
            self._write(oldest)
        held: set[int] = set()
        chunks = 0
        # a day just emptied has no keys to read back
        if self.replacing is None or not self.replacing.empty(self.session, self.source, day):
            for chunk, blob in self.session.execute(select(_T.c.chunk, _T.c.line_keys).where(
                    _T.c.source == self.source, _T.c.day == day)):
                held.update(unpack(blob))
                chunks = max(chunks, chunk + 1)
        self.days[day], self.chunks[day] = held, chunks
        return held

    def _write(self, day: int) -> None:
        """Store the day's added keys as its next chunk (the day was read when its first
        key came, so its chunk count is known)."""
        keys = self.added.pop(day, None)
        if not keys:
            return
        chunk = self.chunks[day]
        self.chunks[day] = chunk + 1
        self.session.execute(insert(_T).values(source=self.source, day=day, chunk=chunk,
                                                line_keys=pack(keys)))


def pack(keys: list[int]) -> bytes:
    """Keys as 8-byte signed little-endian integers."""
    packed = array("q", keys)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpack(blob: bytes) -> array[int]:
    packed = array("q")
    packed.frombytes(blob)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed
