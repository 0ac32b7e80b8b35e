"""Reading settled hours back: the rows of `gpu_readings`' shape that an instance's blocks
hold (`costguard.store.blocks`), for `costguard.store.readings.read_rows`, which reads
`gpu_readings` (the hours not yet settled, and readings that came late) and these together.
Where both hold a reading of the same GPU and minute, `gpu_readings`' (the later) is the
one read, as compaction would keep it."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from costguard.store import blocks
from costguard.store.compact import BLOCKS, SERIES, hour_of, hour_start
from costguard.store.refs import ids_by_provider

log = logging.getLogger(__name__)

# a block entry as a row: these, then blocks.VALUE_FIELDS
_LEADING = ("provider", "instance_id", "gpu_index", "minute", "source", "span_minutes")
_COMBINED = _LEADING + blocks.VALUE_FIELDS
_AT = {name: i for i, name in enumerate(_COMBINED)}
_FETCH = 200  # blocks fetched from the driver at a time (~13 KB each for an 8-GPU host)
_TICK = timedelta(microseconds=1)
_IN_CHUNK = 500


class SettledReads:
    """The blocks of one provider's `instance_ids` with hours in [lo, end)."""

    def __init__(self, session: Session, provider: str, instance_ids: Sequence[str],
                 lo: datetime, end: datetime) -> None:
        self.session, self.provider = session, provider
        self.lo_hour, self.hi_hour = hour_of(lo), hour_of(end - _TICK)
        self.names: dict[int, str] = {}
        self.held: set[tuple[str, int]] = set()
        if end > lo:  # one query: the instances' series numbers and their blocks' hours
            rows = session.execute(select(SERIES.c.id, SERIES.c.instance_id, BLOCKS.c.hour).join(
                BLOCKS, BLOCKS.c.series_id == SERIES.c.id).where(
                SERIES.c.provider == provider, SERIES.c.instance_id.in_(list(instance_ids)),
                BLOCKS.c.hour.between(self.lo_hour, self.hi_hour)))
            for sid, iid, hour in rows:
                self.names[int(sid)] = str(iid)
                self.held.add((str(iid), int(hour)))
        self.shadowed: set[tuple[str, int, int]] = set()

    def shadow(self, instance_id: str, gpu_index: int, minute: datetime) -> None:
        """Note a reading `gpu_readings` gave for this key: the block's copy is not read."""
        if self.held:
            stamp = int(minute.timestamp()) // 60
            if (instance_id, stamp // 60) in self.held:
                self.shadowed.add((instance_id, gpu_index, stamp))

    def rows(self, fields: Sequence[str], start: datetime, end: datetime, *, spanning: bool,
             skip: tuple[str, datetime] | None) -> Iterator[tuple[str, list[Any]]]:
        """(instance id, the `fields`' values) of each block reading that covers a minute of
        [start, end) (with `spanning` False: that begins in it), as `read_rows` filters."""
        if not self.held:
            return
        at = [_AT[f] for f in fields]
        start_s, end_s = start.timestamp(), end.timestamp()
        skip_code = blocks.source_code(skip[0]) if skip is not None else -1
        skip_s = skip[1].timestamp() if skip is not None else 0.0
        when: dict[int, datetime] = {}
        stmt = select(BLOCKS.c.series_id, BLOCKS.c.hour, BLOCKS.c.payload).where(
            BLOCKS.c.series_id.in_(list(self.names)),
            BLOCKS.c.hour.between(self.lo_hour, self.hi_hour))
        for part in self.session.execute(stmt).partitions(_FETCH):
            for sid, hour, payload in part:
                iid = self.names[sid]
                try:
                    entries = blocks.decode(bytes(payload))
                except ValueError as exc:
                    log.warning("a reading block of %s at hour %s is unreadable, its "
                                "readings left out: %s", iid, hour, exc)
                    continue
                base = int(hour) * 60
                for gpu, offset, span, code, values in entries:
                    stamp = base + offset
                    began = stamp * 60
                    if began >= end_s or (began < start_s and (
                            not spanning or span == 1 or began + span * 60 <= start_s)):
                        continue
                    if code == skip_code and began >= skip_s:
                        continue
                    if (iid, gpu, stamp) in self.shadowed:
                        continue
                    minute = when.get(stamp)
                    if minute is None:
                        minute = when[stamp] = datetime.fromtimestamp(stamp * 60, UTC)
                    row = (self.provider, iid, gpu, minute, blocks.SOURCES[code], span,
                           *values)
                    yield iid, [row[i] for i in at]



def heard(session: Session, source: str, since: datetime,
          refs: Iterable[tuple[str, str]] | None = None) -> set[tuple[str, str]]:
    """The instances (of `refs`, or all) whose settled hours hold `source`'s readings from
    `since` on: by the blocks' source bits, and for the hour `since` falls inside, by the
    readings themselves."""
    bit = 1 << blocks.source_code(source)
    first = hour_of(since)
    whole = first if hour_start(first) == since else first + 1
    stmt = select(SERIES.c.provider, SERIES.c.instance_id, SERIES.c.id, BLOCKS.c.hour).join(
        BLOCKS, BLOCKS.c.series_id == SERIES.c.id).where(
        BLOCKS.c.hour >= first, BLOCKS.c.sources.op("&")(bit) != 0)
    found: list[Any] = []
    if refs is None:
        found += session.execute(stmt).all()
    else:
        for provider, ids in ids_by_provider(refs).items():
            for at in range(0, len(ids), _IN_CHUNK):
                found += session.execute(stmt.where(
                    SERIES.c.provider == provider,
                    SERIES.c.instance_id.in_(ids[at:at + _IN_CHUNK]))).all()
    out = {(str(p), str(i)) for p, i, _, hour in found if hour >= whole}
    edge = {int(sid): (str(p), str(i)) for p, i, sid, hour in found
            if hour < whole and (str(p), str(i)) not in out}
    code, since_s = blocks.source_code(source), since.timestamp()
    sids = sorted(edge)
    for at in range(0, len(sids), _IN_CHUNK):
        rows = session.execute(select(BLOCKS.c.series_id, BLOCKS.c.payload).where(
            BLOCKS.c.series_id.in_(sids[at:at + _IN_CHUNK]), BLOCKS.c.hour == first))
        out.update(edge[int(sid)] for sid, payload in rows
                   if _has(payload, first, code, since_s))
    return out


def _has(payload: bytes, hour: int, code: int, since_s: float) -> bool:
    try:
        entries = blocks.decode(bytes(payload))
    except ValueError:
        return False
    return any(e[3] == code and (hour * 60 + e[1]) * 60 >= since_s for e in entries)
