"""Report queries: spend grouped by any dimension, aggregated in SQL over raw + daily rows.

Raw intervals after the rollup watermark and daily rollups before it are read as one
source (`report/facts.py`), so a report spans retention boundaries without double
counting. An interval counts in a period when its start falls in [since, until); a period
that starts or ends inside a rolled-up day reads that day from its raw intervals while
they are kept, and is widened to the whole UTC day (the rollup's grain) once they are
pruned.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import (
    ColumnElement,
    Subquery,
    distinct,
    func,
    select,
)
from sqlmodel import Session

from costguard.accelerators import kind_column
from costguard.clock import utc
from costguard.costs.attribution import UNATTRIBUTED
from costguard.costs.rollup import (
    DAILY,
    SUMMARY,
    day_floor,
    rolled_up_until,
    summary_current,
)
from costguard.model import Instance, InstanceState, Lifecycle, PriceQuote
from costguard.report.facts import facts, presence
from costguard.report.figures import Report, ReportRow
from costguard.report.owners import OWNER_DIMENSIONS, spend_with_owners

if TYPE_CHECKING:
    from costguard.billing.compare import BilledComparison

DIMENSIONS: dict[str, str] = {
    "team": "team", "project": "project", "env": "env", "cost-center": "cost_center",
    "account": "account", "provider": "provider", "region": "region",
    "instance-type": "instance_type", "lifecycle": "lifecycle", "instance": "instance_id",
    # read from the instance's inventory row, not the intervals: report/owners.py
    "owner": "owner", "owner-kind": "owner_kind", "managed": "managed",
    # what a policy governs it as: instance, notebook or workload (instances.kind)
    "kind": "kind",
    # GPU, TPU, Trainium, Inferentia or none, from the instance type and its accelerators
    # (costguard/accelerators.py)
    "accelerator": "instance_type",
}
# read per instance (their count of accelerators is not in the per-day runs): no summary
_PER_INSTANCE = {"instance", "accelerator"}
ATTRIBUTED = {"team", "project", "env", "cost-center"}
SpotPrice = Callable[[str, str, str, int], PriceQuote | None]


class UnknownDimension(ValueError):
    def __init__(self, dim: str) -> None:
        super().__init__(f"unknown dimension {dim!r} (choose from: {', '.join(DIMENSIONS)})")


def check_dimension(dim: str) -> str:
    if dim not in DIMENSIONS:
        raise UnknownDimension(dim)
    return dim


def _key(f: Subquery, dim: str) -> ColumnElement[str]:
    column = f.c[DIMENSIONS[check_dimension(dim)]]
    if dim == "accelerator":
        return kind_column(column, f.c.gpu_count)
    return func.coalesce(column, UNATTRIBUTED) if dim in ATTRIBUTED else column


def _where(f: Subquery, filters: Mapping[str, str]) -> list[ColumnElement[bool]]:
    return [_key(f, dim) == value for dim, value in filters.items()]


def _among(f: Subquery, instance_ids: Collection[str] | None) -> list[ColumnElement[bool]]:
    """`instance_ids` as a WHERE clause (one bound list; callers pass hundreds, not 100k)."""
    if instance_ids is None:
        return []
    return [f.c[DIMENSIONS["instance"]].in_(sorted(set(instance_ids)))]


def spend(
    session: Session, by: Sequence[str], since: datetime, until: datetime,
    filters: Mapping[str, str] | None = None, *, spot_price: SpotPrice | None = None,
    compare: str | None = None, instance_ids: Collection[str] | None = None,
) -> Report:
    """Spend with starts in [since, until), grouped by `by`, largest first.

    `spot_price(provider, region, instance_type, gpu_count)` prices the spot alternative
    where no spot run of that type was observed in the period (used for savings).
    `instance_ids`: only these instances' spend (as a filter on `instance` would, for many).
    """
    filters = dict(filters or {})
    if instance_ids is not None and compare is not None:
        raise ValueError("compare with a bill reads every instance: no instance_ids")
    if any(d in OWNER_DIMENSIONS for d in (*by, *filters)):
        if compare is not None:
            raise ValueError("--compare billed cannot group or filter by owner, owner-kind, "
                             "managed or kind (bills do not name the owner or the kind)")
        return spend_with_owners(session, by, since, until, filters,
                                 lambda s, b, a, z, f: spend(s, b, a, z, f,
                                                             spot_price=spot_price,
                                                             instance_ids=instance_ids))
    # the per-day summary has no instance column: only reports that neither group nor
    # filter by instance can read it
    by_instance = (bool(_PER_INSTANCE & {*by, *filters})
                   or instance_ids is not None)
    f = facts(session, since, until, summary=not by_instance)
    where = _where(f, filters) + _among(f, instance_ids)
    keys = [_key(f, d).label(f"k{i}") for i, d in enumerate(by)]
    # Grouped finely enough to price spot savings per type; summed up to `by` in Python.
    detail = [f.c.provider, f.c.region, f.c.instance_type, f.c.gpu_count, f.c.lifecycle,
              f.c.state]
    stmt = select(
        *keys, *detail,
        func.sum(f.c.cost_micros), func.sum(f.c.idle_cost_micros),
        func.sum(f.c.gpu_seconds), func.sum(f.c.idle_gpu_seconds),
        func.sum(f.c.instance_seconds),
    ).where(*where).group_by(*keys, *detail)
    p = f if by_instance else presence(session, since, until)
    p_where = _where(p, filters) + _among(p, instance_ids)
    p_keys = [_key(p, d).label(f"k{i}") for i, d in enumerate(by)]
    counts = dict(_instance_counts(session, p, p_keys, p_where))
    total_instances = session.execute(
        select(func.count(distinct(p.c.instance_id))).where(*p_where)).scalar() or 0

    sums: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0] * 6)
    od_hours: dict[tuple[str, ...], list[tuple[tuple[str, str, str, int], int, float]]] = (
        defaultdict(list))
    spot_seen: dict[tuple[str, str, str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in session.execute(stmt):
        values = tuple(r)
        key = tuple(str(v) if v is not None else UNATTRIBUTED for v in values[:len(keys)])
        provider, region, itype, gpus, lifecycle, state = values[len(keys):len(keys) + 6]
        cost, idle, gsec, igsec = (int(v or 0) for v in values[len(keys) + 6:len(keys) + 10])
        isec = float(values[-1] or 0)
        acc = sums[key]
        acc[0] += cost
        acc[1] += idle
        acc[2] += cost if lifecycle == "spot" else 0
        acc[3] += gsec
        acc[4] += igsec
        ptype = (str(provider), str(region), str(itype), int(gpus or 0))
        if state == "running" and ptype[3] > 0:
            if lifecycle == "spot":
                spot_seen[ptype][0] += cost
                spot_seen[ptype][1] += isec
            elif lifecycle == "on-demand":  # a Capacity Block is paid for: no spot saving
                od_hours[key].append((ptype, cost, isec))
    rows: list[ReportRow] = []
    for key, acc in sums.items():
        savings = sum(_savings(p, cost, isec, spot_seen, spot_price) for p, cost, isec
                      in od_hours.get(key, []))
        rows.append(ReportRow(key=key, cost_micros=acc[0], idle_cost_micros=acc[1],
                              spot_cost_micros=acc[2], gpu_seconds=acc[3],
                              idle_gpu_seconds=acc[4], instances=counts.get(key, 0),
                              savings_micros=savings))
    total = ReportRow(
        key=(), cost_micros=sum(r.cost_micros for r in rows),
        idle_cost_micros=sum(r.idle_cost_micros for r in rows),
        spot_cost_micros=sum(r.spot_cost_micros for r in rows),
        gpu_seconds=sum(r.gpu_seconds for r in rows),
        idle_gpu_seconds=sum(r.idle_gpu_seconds for r in rows), instances=total_instances,
        savings_micros=sum(r.savings_micros for r in rows))
    if not keys:
        rows = []
    rows.sort(key=lambda r: (-r.cost_micros, r.key))
    report = Report(by=tuple(by), since=since, until=until, rows=rows, total=total,
                    filters=filters, compare=compare)
    if compare == "billed":
        from costguard.billing.compare import compare_billed

        report = _with_billed(report, compare_billed(session, by, since, until, filters))
    return report


def _instance_counts(
    session: Session, f: Subquery, keys: Sequence[ColumnElement[str]],
    where: list[ColumnElement[bool]],
) -> list[tuple[tuple[str, ...], int]]:
    if not keys:
        return []
    stmt = select(*keys, func.count(distinct(f.c.instance_id))).where(*where).group_by(*keys)
    out = []
    for r in session.execute(stmt):
        values = tuple(r)
        out.append((tuple(str(v) if v is not None else UNATTRIBUTED for v in values[:-1]),
                    int(values[-1])))
    return out


def _savings(
    ptype: tuple[str, str, str, int], cost: int, seconds: float,
    spot_seen: Mapping[tuple[str, str, str, int], list[float]], spot_price: SpotPrice | None,
) -> int:
    """On-demand cost of these hours minus the same hours at the spot rate (never < 0)."""
    seen = spot_seen.get(ptype)
    rate: float | None = None
    if seen and seen[1] > 0:
        rate = seen[0] / seen[1] * 3600 / 1e6  # observed spot USD/h in this period
    elif spot_price is not None:
        quote = spot_price(*ptype)
        rate = quote.usd_per_hour if quote else None
    if rate is None:
        return 0
    return max(0, cost - round(rate * seconds / 3600 * 1e6))


def _with_billed(report: Report, comparison: BilledComparison) -> Report:
    billed = comparison.compared
    rows = [replace(r, billed_micros=billed.get(r.key, 0)) for r in report.rows]
    seen = {r.key for r in rows}
    for key, micros in billed.items():
        if key not in seen:  # a watched instance billed under a key with no estimate
            rows.append(ReportRow(key=key, cost_micros=0, idle_cost_micros=0,
                                  spot_cost_micros=0, gpu_seconds=0, idle_gpu_seconds=0,
                                  instances=0, billed_micros=micros))
    total = replace(report.total, billed_micros=sum(billed.values()))
    return replace(report, rows=rows, total=total, bill_total_micros=comparison.bill_total_micros,
                   billed_not_compared=tuple((n.provider, n.what, n.billed_micros)
                                             for n in comparison.not_compared))


def catalog_spot_price(catalog: object) -> SpotPrice:
    """A `SpotPrice` from a `PriceCatalog` (spot quote of a type, without a real instance)."""
    from costguard.costs.pricing import PriceCatalog

    assert isinstance(catalog, PriceCatalog)
    when = datetime(2000, 1, 1, tzinfo=UTC)

    def price(provider: str, region: str, instance_type: str, gpus: int) -> PriceQuote | None:
        if provider not in ("aws", "gcp", "sim"):
            return None
        inst = Instance(provider=provider, account="", region=region,
                        instance_id="", instance_type=instance_type,
                        state=InstanceState.RUNNING, lifecycle=Lifecycle.SPOT, gpu_count=gpus,
                        launch_time=when, observed_at=when)
        return catalog.spot(inst)

    return price


def daily_series(
    session: Session, dim: str, since: datetime, until: datetime,
    filters: Mapping[str, str] | None = None,
) -> dict[str, dict[datetime, tuple[int, int]]]:
    """(cost, idle cost) micros per value of `dim` per UTC day, for charts.

    Rolled-up days (before the watermark) are read in one query grouped by their day (the
    per-day summary when it is current and neither `dim` nor a filter names the instance);
    the raw days after it one query per day, which keeps the SQL portable (no dialect
    date functions) and is cheap: each reads one index range. The figures are those of
    `facts` day by day."""
    out: dict[str, dict[datetime, tuple[int, int]]] = defaultdict(dict)
    filters = filters or {}
    day = day_floor(since)
    watermark = rolled_up_until(session)
    if watermark is not None and day < watermark:
        end = min(until, watermark)
        per_instance = "instance" in (dim, *filters)
        table = DAILY if per_instance or not summary_current(session) else SUMMARY
        f = select(table).where(table.c.day >= day, table.c.day < end).subquery("facts")
        key = _key(f, dim)
        stmt = (select(f.c.day, key, func.sum(f.c.cost_micros),
                       func.sum(f.c.idle_cost_micros))
                .where(*_where(f, filters)).group_by(f.c.day, key))
        for when, value, cost, idle in session.execute(stmt):
            out[str(value)][day_floor(utc(when))] = (int(cost or 0), int(idle or 0))
        day = until if end >= until else watermark  # rollup() keeps it on a midnight
    while day < until:
        nxt = min(day + timedelta(days=1), until)
        f = facts(session, max(day, since), nxt)
        key = _key(f, dim)
        stmt = select(key, func.sum(f.c.cost_micros), func.sum(f.c.idle_cost_micros)).where(
            *_where(f, filters)).group_by(key)
        for value, cost, idle in session.execute(stmt):
            out[str(value)][day] = (int(cost or 0), int(idle or 0))
        day += timedelta(days=1)
    return dict(out)


@dataclass(frozen=True)
class IdleInstance:
    provider: str
    instance_id: str
    instance_type: str
    team: str
    idle_cost_micros: int
    cost_micros: int
    idle_gpu_seconds: int


def top_idle(
    session: Session, since: datetime, until: datetime,
    filters: Mapping[str, str] | None = None, limit: int = 10,
) -> list[IdleInstance]:
    f = facts(session, since, until)
    idle = func.sum(f.c.idle_cost_micros)
    stmt = (select(f.c.provider, f.c.instance_id, func.max(f.c.instance_type),
                   func.max(func.coalesce(f.c.team, UNATTRIBUTED)), idle,
                   func.sum(f.c.cost_micros), func.sum(f.c.idle_gpu_seconds))
            .where(*_where(f, filters or {}))
            .group_by(f.c.provider, f.c.instance_id)
            .having(idle > 0).order_by(idle.desc(), f.c.instance_id).limit(limit))
    return [IdleInstance(str(p), str(i), str(t), str(team), int(ic), int(c), int(igs))
            for p, i, t, team, ic, c, igs in session.execute(stmt)]



_KNOWN_COLUMNS = {"team": "team", "project": "project", "env": "env",
                  "cost-center": "cost_center"}


def unknown_value(session: Session, dimension: str, value: str) -> list[str] | None:
    """The values ever recorded for an attribution `dimension` (the first 12), when `value`
    is not among them; None when it is, or the dimension is not one of those kept."""
    from sqlalchemy import select as sa_select

    from costguard.costs.attribution import UNATTRIBUTED
    from costguard.store.tables import CostIntervalRow

    name = _KNOWN_COLUMNS.get(dimension)
    if name is None:
        return None
    column = getattr(CostIntervalRow, name)
    if value == UNATTRIBUTED:
        hit = session.execute(sa_select(column).where(column.is_(None)).limit(1)).first()
    else:
        hit = session.execute(sa_select(column).where(column == value).limit(1)).first()
    if hit is not None:
        return None
    seen = session.execute(sa_select(column).where(column.is_not(None)).distinct()
                           .order_by(column).limit(12)).scalars().all()
    return [str(v) for v in seen]
