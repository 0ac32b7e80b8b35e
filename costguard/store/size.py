"""What the store holds and what it takes on disk (`costguard db size`): the rows and bytes,
indexes included, of each of costguard's tables, and the readings' own figures: the
GPU-minutes still rows (`gpu_readings`, the hours not settled yet), the instance-hours
settled into compressed blocks of raw minutes (`reading_blocks`, kept
`accounting.readings_raw`) and into hourly history (`reading_hours`, kept
`accounting.readings_history`), and the bytes each costs.

Bytes are the database's own accounting: SQLite's `dbstat` pages (the file's size alone
where SQLite was built without it), PostgreSQL's `pg_total_relation_size` (heap, indexes,
TOAST) as the tables stand, dead rows and all: nothing is vacuumed. How many readings and
GPU-hours a block and an hour of history hold is inside their compressed payloads: the
newest `sample` of each are decoded to measure it (every one, on a store with fewer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Table, func, inspect, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError
from sqlmodel import SQLModel

from costguard.store import blocks, hours
from costguard.store.block_tables import ReadingBlockRow, ReadingHourRow, ReadingSeriesRow
from costguard.store.compact import hour_start
from costguard.store.db import Database, load_all_tables
from costguard.store.tables import GpuReadingRow

SAMPLE = 1_000  # blocks (and hours of history) decoded to measure what one holds
_DBSTAT = "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"


@dataclass(frozen=True)
class TableSize:
    name: str
    rows: int
    bytes: int | None  # None: this SQLite was built without `dbstat`


@dataclass(frozen=True)
class Sample:
    """The newest blocks (or hours of history) decoded: how many (`blobs`), the readings (or
    GPU-hours) they hold, the GPU-minutes those readings cover (a 5-minute CloudWatch point
    is one reading of five; none for history), their payloads' bytes, and how many did not
    decode (not in `blobs`)."""

    blobs: int
    items: int
    minutes: int
    payload_bytes: int
    unreadable: int

    def per_blob(self) -> float | None:
        return self.items / self.blobs if self.blobs else None


@dataclass(frozen=True)
class StoreSize:
    backend: str  # "sqlite" or "postgresql"
    measured: str  # how the bytes were counted
    total_bytes: int  # the database's own: the SQLite file, or PostgreSQL's database
    free_bytes: int | None  # SQLite's free pages (reused as it grows; VACUUM returns them)
    tables: list[TableSize]
    blocks: Sample
    history: Sample
    oldest_block: datetime | None
    oldest_history: datetime | None

    def table(self, name: str) -> TableSize | None:
        return next((t for t in self.tables if t.name == name), None)

    def _bytes(self, *names: str) -> int | None:
        sizes = [t.bytes for t in self.tables if t.name in names]
        return None if not sizes or None in sizes else sum(s for s in sizes if s is not None)

    def raw_rows(self) -> tuple[int, float | None]:
        """The GPU-minutes still rows, and their bytes each (indexes included)."""
        t = self.table(GpuReadingRow.__tablename__)
        if t is None:
            return 0, None
        return t.rows, (t.bytes / t.rows if t.bytes is not None and t.rows else None)

    def settled_per_minute(self) -> float | None:
        """Bytes of the blocks' tables (and the series they share) per GPU-minute they
        cover, where a sample measured what a block holds."""
        size = self._bytes(ReadingBlockRow.__tablename__, ReadingSeriesRow.__tablename__)
        blocks_table = self.table(ReadingBlockRow.__tablename__)
        if size is None or blocks_table is None or not self.blocks.blobs \
                or not self.blocks.minutes:
            return None
        return size / (blocks_table.rows * self.blocks.minutes / self.blocks.blobs)

    def history_per_gpu_hour(self) -> float | None:
        size = self._bytes(ReadingHourRow.__tablename__)
        hours_table = self.table(ReadingHourRow.__tablename__)
        if size is None or hours_table is None or not self.history.blobs \
                or not self.history.items:
            return None
        return size / (hours_table.rows * self.history.items / self.history.blobs)


def _tables(con: Connection) -> list[Table]:
    # every table module, not only those this command's imports brought in: `db size` had
    # left out the alert deliveries, the bills, the daily roll-ups and the verdicts
    load_all_tables()
    present = set(inspect(con).get_table_names())
    return [t for t in SQLModel.metadata.sorted_tables if t.name in present]


def _sqlite_free(con: Connection) -> int:
    return int(con.exec_driver_sql("PRAGMA freelist_count").scalar_one()
               * con.exec_driver_sql("PRAGMA page_size").scalar_one())


def _total_bytes(con: Connection) -> int:
    """The SQLite file's bytes, or PostgreSQL's database's."""
    if con.dialect.name == "sqlite":
        return int(con.exec_driver_sql("PRAGMA page_count").scalar_one()
                   * con.exec_driver_sql("PRAGMA page_size").scalar_one())
    return int(con.execute(text("SELECT pg_database_size(current_database())")).scalar_one())


def table_bytes(con: Connection, names: Sequence[str]) -> tuple[dict[str, int] | None, str]:
    """The bytes of each table of `names`, its indexes counted with it, and how they were
    counted (the store-size bench measures with it too). None where SQLite was built
    without `dbstat`. PostgreSQL's figure is the tables as they stand: a caller that wants
    them without dead rows vacuums first."""
    if con.dialect.name != "sqlite":
        return ({name: int(con.execute(text(
            "SELECT pg_total_relation_size(CAST(:t AS regclass))"), {"t": name}).scalar_one())
            for name in names}, "pg_total_relation_size (heap, indexes, TOAST; dead rows too)")
    owner: dict[str, str] = dict(con.exec_driver_sql(
        "SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')").all())
    try:
        pages = con.exec_driver_sql(_DBSTAT).all()
    except OperationalError as exc:  # built without the dbstat table
        if "dbstat" not in str(exc):
            raise
        return None, "unknown (this SQLite was built without dbstat)"
    out = dict.fromkeys(names, 0)
    for name, size in pages:
        table = owner.get(name, name)
        if table in out:
            out[table] += int(size or 0)
    return out, "SQLite's dbstat pages of each table and its indexes"


def _sample(con: Connection, table: Table, n: int, *, history: bool) -> Sample:
    """The newest `n` payloads of `table` decoded (`Sample`)."""
    payloads = con.execute(select(table.c.payload).order_by(table.c.hour.desc()).limit(n)
                           ).scalars().all()
    items = minutes = unreadable = 0
    for payload in payloads:
        try:
            if history:
                items += len(hours.decode(payload))
            else:
                entries = blocks.decode(payload)
                items += len(entries)
                minutes += sum(e[2] for e in entries)
        except ValueError:  # a garbled blob: counted, never a crash
            unreadable += 1
    read = len(payloads) - unreadable
    return Sample(blobs=read, items=items, minutes=minutes,
                  payload_bytes=sum(len(p) for p in payloads), unreadable=unreadable)


def _oldest(con: Connection, table: Table) -> datetime | None:
    hour = con.execute(select(func.min(table.c.hour))).scalar_one_or_none()
    try:
        return None if hour is None else hour_start(int(hour))
    except (ValueError, OverflowError, OSError):  # an hour no date holds: not said
        return None


def measure(db: Database, *, sample: int = SAMPLE) -> StoreSize:
    """What `db` holds and takes (see the module's doc). Reads only: counts every table's
    rows (seconds on a store of hundreds of millions of rows)."""
    with db.engine.connect() as con:
        tables = _tables(con)
        names = [t.name for t in tables]
        backend = con.dialect.name
        by_table, how = table_bytes(con, names)
        sizes = [TableSize(t.name, int(con.execute(select(func.count()).select_from(t))
                                       .scalar_one()),
                           None if by_table is None else by_table[t.name])
                 for t in tables]
        block_table = ReadingBlockRow.__table__  # type: ignore[attr-defined]
        hour_table = ReadingHourRow.__table__  # type: ignore[attr-defined]
        present = set(names)
        empty = Sample(0, 0, 0, 0, 0)
        return StoreSize(
            backend=backend, measured=how, total_bytes=_total_bytes(con), tables=sizes,
            free_bytes=_sqlite_free(con) if backend == "sqlite" else None,
            blocks=(_sample(con, block_table, sample, history=False)
                    if block_table.name in present else empty),
            history=(_sample(con, hour_table, sample, history=True)
                     if hour_table.name in present else empty),
            oldest_block=_oldest(con, block_table) if block_table.name in present else None,
            oldest_history=_oldest(con, hour_table) if hour_table.name in present else None)
