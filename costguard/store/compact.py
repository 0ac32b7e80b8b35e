"""Settling readings: the hours of `gpu_readings` that ended at least `SETTLE` ago are folded
into a compressed block per instance and hour (`costguard.store.blocks`) and a row of
hourly history (`costguard.store.hours`), and leave `gpu_readings`, which so keeps the
minutes still arriving (an agent's minute, a cloud's late period) and little else.

Each batch of instances and hours is one transaction: its rows are taken out of
`gpu_readings` with DELETE .. RETURNING (a reading that arrives meanwhile stays for the next
run), merged into any block the hour already has (a late reading replaces the block's
reading of the same GPU and minute, as a later write does in `gpu_readings`), and the
blocks and hours written. A run killed part way loses nothing: the batch in flight rolls
back, the batches before it are done, and the next run goes on from there. The daemon
compacts at every prune (hourly); `costguard db compact` does the same from the command
line with progress, which is how a store from before revision 0020 moves its rows once.

Prunes by hour: blocks past `accounting.readings_raw`, history past
`accounting.readings_history`, and the series no row refers to any more.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Table, delete, exists, func, select
from sqlmodel import Session

from costguard.store import blocks, hours
from costguard.store.block_tables import ReadingBlockRow, ReadingHourRow, ReadingSeriesRow
from costguard.store.refs import ids_by_provider
from costguard.store.tables import GpuReadingRow
from costguard.store.upsert import dialect_insert

log = logging.getLogger(__name__)

SETTLE = timedelta(hours=1)  # an hour is folded once it ended this long ago
SLICE = 2  # hours of a batch's readings taken in one transaction
_READINGS: Table = GpuReadingRow.__table__  # type: ignore[attr-defined]
SERIES: Table = ReadingSeriesRow.__table__  # type: ignore[attr-defined]
BLOCKS: Table = ReadingBlockRow.__table__  # type: ignore[attr-defined]
HOURS: Table = ReadingHourRow.__table__  # type: ignore[attr-defined]
_TAKEN = ("instance_id", "gpu_index", "minute", "source", "span_minutes", *blocks.VALUE_FIELDS)
_IN_CHUNK = 500
Progress = Callable[[int, int], None]  # (instances done, instances to do)


def hour_of(when: datetime) -> int:
    """Hours since 1970-01-01 UTC of the hour `when` falls in."""
    return math.floor(when.timestamp() / 3600)


def hour_start(hour: int) -> datetime:
    return datetime.fromtimestamp(hour * 3600, UTC)


def settled_before(now: datetime) -> int:
    """The first hour not yet settled at `now`."""
    return hour_of(now - SETTLE)


@dataclass
class Compacted:
    instances: int = 0
    readings: int = 0  # rows taken out of gpu_readings
    blocks: int = 0  # instance-hours written
    late_dropped: int = 0  # readings of an hour past the raw window whose history was kept

    def add(self, other: Compacted) -> None:
        self.instances += other.instances
        self.readings += other.readings
        self.blocks += other.blocks
        self.late_dropped += other.late_dropped


def pending(session: Session, before: int) -> list[tuple[str, str]]:
    """The instances with readings in `gpu_readings` of hours before `before`."""
    t = _READINGS
    stmt = select(t.c.provider, t.c.instance_id).where(
        t.c.minute < hour_start(before), t.c.source.in_(blocks.SOURCES)).distinct()
    return sorted((str(p), str(i)) for p, i in session.execute(stmt))


def compact(session_of: Callable[[], Any], now: datetime, *, raw_since: datetime,
            batch: int = 50, progress: Progress | None = None) -> Compacted:
    """Fold every settled hour of `gpu_readings`, `batch` instances and `SLICE` hours a
    transaction (an 8-GPU host's hour is 480 rows: a store's 35 days of rows moved at
    once would not fit in memory). `session_of()` opens a session (a context manager
    that commits on success); `raw_since`: the raw window's start (older hours keep their
    history as it is)."""
    before = settled_before(now)
    with session_of() as s:
        todo = pending(s, before)
    done = Compacted()
    if progress is not None:
        progress(0, len(todo))
    count = 0
    for provider, ids in ids_by_provider(todo).items():
        for first in range(0, len(ids), batch):
            chunk = ids[first:first + batch]
            with session_of() as s:
                oldest = _oldest(s, provider, chunk)
            for lo in range(before if oldest is None else hour_of(oldest), before, SLICE):
                with session_of() as s:
                    part = compact_instances(s, provider, chunk, min(lo + SLICE, before),
                                             raw_hour=hour_of(raw_since), since=lo)
                done.add(part)
            done.instances += len(chunk)
            count += len(chunk)
            if progress is not None:
                progress(count, len(todo))
    if done.readings:
        log.info("readings settled", extra={"instances": done.instances,
                                            "readings": done.readings, "blocks": done.blocks,
                                            "late_dropped": done.late_dropped})
    return done


def _oldest(s: Session, provider: str, ids: Sequence[str]) -> datetime | None:
    t = _READINGS
    found: datetime | None = s.execute(select(func.min(t.c.minute)).where(
        t.c.provider == provider, t.c.instance_id.in_(list(ids)),
        t.c.source.in_(blocks.SOURCES))).scalar_one_or_none()
    return found


def compact_instances(s: Session, provider: str, ids: Sequence[str], before: int, *,
                      raw_hour: int, since: int | None = None) -> Compacted:
    """One batch: take the instances' readings of hours [`since`, `before`) out of
    `gpu_readings` and fold them into blocks and history (in `s`'s transaction)."""
    t = _READINGS
    # a source a block has no code for (a row a newer costguard wrote) stays a row, to be
    # read and pruned as rows are, never a batch that fails every hour
    where = [t.c.provider == provider, t.c.instance_id.in_(list(ids)),
             t.c.minute < hour_start(before), t.c.source.in_(blocks.SOURCES)]
    if since is not None:
        where.append(t.c.minute >= hour_start(since))
    taken = s.execute(delete(t).where(*where).returning(*(t.c[c] for c in _TAKEN))).all()
    out = Compacted(readings=len(taken))
    if not taken:
        return out
    grouped: dict[tuple[str, int], dict[tuple[int, int], blocks.Entry]] = defaultdict(dict)
    for row in taken:
        minute: datetime = row[2]
        stamp = int(minute.timestamp()) // 60
        hour, offset = divmod(stamp, 60)
        grouped[(row[0], hour)][(row[1], offset)] = (
            int(row[1]), offset, int(row[4]), blocks.source_code(row[3]), tuple(row[5:]))
    series = series_ids(s, provider, {iid for iid, _ in grouped})
    keys = [(series[iid], hour) for iid, hour in grouped]
    held = _existing(s, BLOCKS, keys)
    kept = _existing(s, HOURS, [k for k in keys if k[1] < raw_hour and k not in held])
    block_rows, hour_rows = [], []
    for (iid, hour), fresh in grouped.items():
        key = (series[iid], hour)
        if key in kept:  # the hour's block is pruned: its history stands, the late rows go
            out.late_dropped += len(fresh)
            continue
        merged = _merged(held.get(key), fresh, iid, hour)
        entries = [merged[k] for k in sorted(merged)]
        sources = blocks.present_sources(entries)
        block_rows.append({"series_id": key[0], "hour": hour, "sources": sources,
                           "payload": blocks.encode(entries)})
        hour_rows.append({"series_id": key[0], "hour": hour, "sources": sources,
                          "payload": hours.encode(hours.summarize(entries))})
    _put(s, BLOCKS, block_rows)
    _put(s, HOURS, hour_rows)
    out.blocks = len(block_rows)
    return out


def _merged(payload: bytes | None, fresh: dict[tuple[int, int], blocks.Entry], iid: str,
            hour: int) -> dict[tuple[int, int], blocks.Entry]:
    if payload is None:
        return fresh
    try:
        merged = {(e[0], e[1]): e for e in blocks.decode(payload)}
    except ValueError as exc:
        log.warning("a reading block of %s at hour %s is unreadable (%s): replaced by the "
                    "readings that arrived since", iid, hour, exc)
        return fresh
    merged.update(fresh)
    return merged


def series_ids(s: Session, provider: str, instance_ids: Iterable[str]) -> dict[str, int]:
    """The series number of each instance, created where it has none."""
    wanted = sorted(set(instance_ids))
    found = lookup_series(s, provider, wanted)
    missing = [i for i in wanted if i not in found]
    if missing:
        stmt = dialect_insert(SERIES, s.get_bind().dialect.name).on_conflict_do_nothing(
            index_elements=["provider", "instance_id"])
        s.execute(stmt, [{"provider": provider, "instance_id": i} for i in missing])
        found.update(lookup_series(s, provider, missing))
    return found


def lookup_series(s: Session, provider: str, instance_ids: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for first in range(0, len(instance_ids), _IN_CHUNK):
        rows = s.execute(select(SERIES.c.instance_id, SERIES.c.id).where(
            SERIES.c.provider == provider,
            SERIES.c.instance_id.in_(list(instance_ids[first:first + _IN_CHUNK]))))
        out.update({str(i): int(n) for i, n in rows})
    return out


def _existing(s: Session, table: Table, keys: Sequence[tuple[int, int]]) -> dict[
        tuple[int, int], bytes]:
    """The payloads `table` holds for `keys` (series, hour), locked for this transaction
    where the database locks rows (PostgreSQL): a second compaction of the same hour waits."""
    by_series: dict[int, list[int]] = defaultdict(list)
    for sid, hour in keys:
        by_series[sid].append(hour)
    out: dict[tuple[int, int], bytes] = {}
    sids = sorted(by_series)
    for first in range(0, len(sids), _IN_CHUNK):
        part = sids[first:first + _IN_CHUNK]
        lo = min(min(by_series[sid]) for sid in part)
        hi = max(max(by_series[sid]) for sid in part)
        rows = s.execute(select(table.c.series_id, table.c.hour, table.c.payload).where(
            table.c.series_id.in_(part), table.c.hour >= lo, table.c.hour <= hi
        ).with_for_update())
        out.update({(int(sid), int(h)): bytes(p) for sid, h, p in rows
                    if h in by_series[sid]})
    return out


def _put(s: Session, table: Table, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    stmt = dialect_insert(table, s.get_bind().dialect.name)
    stmt = stmt.on_conflict_do_update(
        index_elements=["series_id", "hour"],
        set_={"sources": stmt.excluded.sources, "payload": stmt.excluded.payload})
    s.execute(stmt, rows)


def prune(s: Session, *, raw_since: datetime, history_since: datetime) -> dict[str, int]:
    """Blocks of hours before the raw window, history before its own, and series left
    with neither."""
    blocks_gone = s.execute(delete(BLOCKS).where(BLOCKS.c.hour < hour_of(raw_since)))
    hours_gone = s.execute(delete(HOURS).where(HOURS.c.hour < hour_of(history_since)))
    orphans = s.execute(delete(SERIES).where(
        ~exists().where(BLOCKS.c.series_id == SERIES.c.id),
        ~exists().where(HOURS.c.series_id == SERIES.c.id)))
    return {"pruned_blocks": int(blocks_gone.rowcount or 0),  # type: ignore[attr-defined]
            "pruned_hours": int(hours_gone.rowcount or 0),  # type: ignore[attr-defined]
            "pruned_series": int(orphans.rowcount or 0)}  # type: ignore[attr-defined]

