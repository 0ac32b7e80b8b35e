"""GPU-minute readings: idempotent writes, windowed reads for the classifier."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import Table, delete, select
from sqlmodel import Session

from costguard.model import GpuMinute
from costguard.store.tables import GpuReadingRow
from costguard.store.upsert import upsert

_TABLE: Table = GpuReadingRow.__table__  # type: ignore[attr-defined]
_KEY = ("provider", "instance_id", "gpu_index", "minute")
_FIELDS = [c.name for c in _TABLE.columns]

InstanceRef = tuple[str, str]  # (provider, instance_id)


def write_minutes(session: Session, minutes: Sequence[GpuMinute]) -> int:
    """Store readings; the same (provider, instance, gpu, minute) sent twice is kept once."""
    rows = [m.model_dump(mode="python") for m in minutes]
    for row in rows:
        row["source"] = str(row["source"])
    # a batch may repeat a key (agent replay): last one wins, as the upsert would
    dedup = {tuple(r[k] for k in _KEY): r for r in rows}
    upsert(session, _TABLE, list(dedup.values()), _KEY)
    return len(dedup)


def read_minutes(
    session: Session, refs: Iterable[InstanceRef], start: datetime, end: datetime
) -> dict[InstanceRef, list[GpuMinute]]:
    """Readings in [start, end) for the given instances, grouped per instance."""
    wanted = set(refs)
    out: dict[InstanceRef, list[GpuMinute]] = defaultdict(list)
    if not wanted:
        return out
    cols = [_TABLE.c[f] for f in _FIELDS]
    stmt = select(*cols).where(_TABLE.c.minute >= start, _TABLE.c.minute < end)
    providers = {p for p, _ in wanted}
    stmt = stmt.where(_TABLE.c.provider.in_(providers))
    if len(wanted) < 900:
        stmt = stmt.where(_TABLE.c.instance_id.in_([i for _, i in wanted]))
    for row in session.execute(stmt):
        ref = (row.provider, row.instance_id)
        if ref in wanted:
            out[ref].append(GpuMinute.model_construct(**row._asdict()))
    return out


def instances_with_source(
    session: Session, source: str, since: datetime
) -> set[InstanceRef]:
    """Instances that `source` (e.g. the agent) reported for since `since`."""
    stmt = (
        select(_TABLE.c.provider, _TABLE.c.instance_id)
        .where(_TABLE.c.source == source, _TABLE.c.minute >= since)
        .distinct()
    )
    return {(r.provider, r.instance_id) for r in session.execute(stmt)}


def prune_minutes(session: Session, before: datetime) -> int:
    result = session.execute(delete(_TABLE).where(_TABLE.c.minute < before))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
