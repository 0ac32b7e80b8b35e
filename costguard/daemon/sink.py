"""The store sink behind `POST /v1/telemetry`: a batch is written whole or not at all.

The first write of a (provider, instance, gpu, minute) key wins, as in the reference
`MemorySink`: an agent re-sending a batch after a lost acknowledgement changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, tuple_
from sqlalchemy import select as sa_select

from costguard.daemon.metrics import DaemonMetrics
from costguard.model import GpuMinute
from costguard.store.db import Database
from costguard.store.tables import GpuReadingRow
from costguard.store.upsert import upsert

_TABLE: Table = GpuReadingRow.__table__  # type: ignore[attr-defined]
_KEY = ("provider", "instance_id", "gpu_index", "minute")
_CHUNK = 500  # keys per existence query (SQLite caps bound parameters)


class StoreSink:
    def __init__(self, db: Database, metrics: DaemonMetrics | None = None) -> None:
        self.db = db
        self.metrics = metrics

    def __call__(self, minutes: Sequence[GpuMinute]) -> int:
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        for m in minutes:
            row = m.model_dump(mode="python")
            row["source"] = str(row["source"])
            rows.setdefault(tuple(row[k] for k in _KEY), row)  # first in the batch wins
        keys = list(rows)
        # one transaction: the existence check and the insert commit (or roll back) together
        with self.db.session() as s:
            existing: set[tuple[Any, ...]] = set()
            cols = [_TABLE.c[k] for k in _KEY]
            for i in range(0, len(keys), _CHUNK):
                chunk = keys[i:i + _CHUNK]
                found = s.execute(sa_select(*cols).where(tuple_(*cols).in_(chunk))).all()
                existing.update(_normalise(tuple(r)) for r in found)
            new = [row for key, row in rows.items() if _normalise(key) not in existing]
            upsert(s, _TABLE, new, _KEY, update=False)
        if self.metrics is not None:
            self.metrics.agent_batches.inc()
            self.metrics.agent_minutes.labels("stored").inc(len(new))
            self.metrics.agent_minutes.labels("duplicate").inc(len(minutes) - len(new))
        return len(new)


def _normalise(key: tuple[Any, ...]) -> tuple[Any, ...]:
    provider, instance, gpu, minute = key
    # SQLite hands datetimes back naive; compare in UTC either way
    from costguard.clock import utc

    return (provider, instance, int(gpu), utc(minute))
