"""Report queries: spend grouped by attribution and inventory dimensions, aggregated in SQL."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Table, case, distinct, func, select
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import Session

from costguard.store.tables import CostIntervalRow

_T: Table = CostIntervalRow.__table__  # type: ignore[attr-defined]

DIMENSIONS: dict[str, str] = {
    "team": "team", "project": "project", "env": "env", "cost-center": "cost_center",
    "account": "account", "provider": "provider", "region": "region",
    "instance-type": "instance_type", "lifecycle": "lifecycle", "instance": "instance_id",
}
ATTRIBUTED = {"team", "project", "env", "cost-center"}
UNATTRIBUTED = "unattributed"


@dataclass(frozen=True)
class ReportRow:
    key: tuple[str, ...]
    cost_micros: int
    idle_cost_micros: int
    spot_cost_micros: int
    gpu_seconds: int
    idle_gpu_seconds: int
    instances: int

    @property
    def idle_share(self) -> float:
        return self.idle_cost_micros / self.cost_micros if self.cost_micros else 0.0

    @property
    def spot_share(self) -> float:
        return self.spot_cost_micros / self.cost_micros if self.cost_micros else 0.0


@dataclass(frozen=True)
class Report:
    by: tuple[str, ...]
    since: datetime
    until: datetime
    rows: list[ReportRow]
    total: ReportRow


def _column(dim: str) -> ColumnElement[str]:
    if dim not in DIMENSIONS:
        raise ValueError(f"unknown dimension {dim!r} (choose from: {', '.join(DIMENSIONS)})")
    col = _T.c[DIMENSIONS[dim]]
    return func.coalesce(col, UNATTRIBUTED) if dim in ATTRIBUTED else col


def spend(
    session: Session, by: Sequence[str], since: datetime, until: datetime,
    filters: Mapping[str, str] | None = None,
) -> Report:
    """Spend in intervals starting in [since, until), grouped by `by`, largest first."""
    keys = [_column(d).label(f"k{i}") for i, d in enumerate(by)]
    measures = [
        func.coalesce(func.sum(_T.c.cost_micros), 0).label("cost"),
        func.coalesce(func.sum(_T.c.idle_cost_micros), 0).label("idle"),
        func.coalesce(func.sum(case((_T.c.lifecycle == "spot", _T.c.cost_micros), else_=0)),
                      0).label("spot"),
        func.coalesce(func.sum(_T.c.gpu_seconds), 0).label("gpu"),
        func.coalesce(func.sum(_T.c.idle_gpu_seconds), 0).label("idle_gpu"),
        func.count(distinct(_T.c.provider + ":" + _T.c.instance_id)).label("n"),
    ]
    where = [_T.c.start >= since, _T.c.start < until]
    for dim, value in (filters or {}).items():
        col = _column(dim)
        where.append(col == value)
    stmt = select(*keys, *measures).where(*where)
    if keys:
        stmt = stmt.group_by(*keys).order_by(func.sum(_T.c.cost_micros).desc())
    rows = [_row(r, len(keys)) for r in session.execute(stmt)] if keys else []
    total_stmt = select(*measures).where(*where)
    total = _row(session.execute(total_stmt).one(), 0)
    return Report(by=tuple(by), since=since, until=until, rows=rows, total=total)


def _row(r: object, nkeys: int) -> ReportRow:
    values = tuple(r)  # type: ignore[call-overload]
    key = tuple(str(v) if v is not None else UNATTRIBUTED for v in values[:nkeys])
    cost, idle, spot, gpu, idle_gpu, n = (int(v or 0) for v in values[nkeys:])
    return ReportRow(key=key, cost_micros=cost, idle_cost_micros=idle, spot_cost_micros=spot,
                     gpu_seconds=gpu, idle_gpu_seconds=idle_gpu, instances=n)
