"""Billed beside estimated, like with like.

costguard estimates what its instances cost; a bill holds much more (storage, networking,
support, taxes, credits, commitment purchases). Comparing the two per team as they stand
makes every other service look like an estimation gap. So the lines of an imported bill are
split in two:

- **Compared**: Usage lines whose ResourceId names an instance costguard keeps in its
  inventory (an EC2 ARN or bare id, a Compute Engine global name), at their EffectiveCost
  (Savings Plans, RIs, CUDs and negotiated discounts included, as the estimates learned from
  the bill are). Cost Explorer groups (one total per tag value, all services) are compared
  as they are: they cannot be split.
- **Not compared**: everything else, each kind as its own row at its BilledCost: other
  services by name, instances costguard does not watch, and the non-usage categories
  (Purchase, Tax, Credit, Adjustment).

Bills are kept as sums per day (billing.store). A charge counts in a report's window in
proportion to how much of its charge period the window covers: a day's sums that the
window cuts (its first and last day, for `--since 7d`) count by the share of their hours
inside it, as does a month's charge (a commitment purchase, a tax line).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import ColumnElement, func, select
from sqlmodel import Session

from costguard.billing.importer import BILLED_DIMENSIONS
from costguard.billing.rates import instance_ref, inventory_of
from costguard.clock import utc
from costguard.costs.attribution import UNATTRIBUTED
from costguard.errors import ConfigError
from costguard.store.bill_tables import BillingCostRow

UNWATCHED = "instances costguard does not watch"


@dataclass(frozen=True)
class NotCompared:
    """Billed spend no estimate covers: one kind of line of one provider."""

    provider: str
    what: str  # a service name, UNWATCHED, or a charge category (Tax, Credit, ...)
    billed_micros: int
    lines: int


@dataclass
class BilledComparison:
    compared: dict[tuple[str, ...], int] = field(default_factory=dict)  # key of `by` -> micros
    not_compared: list[NotCompared] = field(default_factory=list)  # largest first
    bill_total_micros: int = 0  # BilledCost of every line in the period (the invoice's sum)


def _column(dim: str) -> str:
    name = BILLED_DIMENSIONS.get(dim)
    if name is None:
        raise ConfigError(
            f"bills carry no {dim!r}: compare billed by {', '.join(BILLED_DIMENSIONS)} "
            "(drop --compare billed or change --by)")
    return name


def compare_billed(session: Session, by: Sequence[str], since: datetime, until: datetime,
                   filters: Mapping[str, str] | None = None) -> BilledComparison:
    """Split what the bills charged in [since, until) (a charge the window cuts, by the
    share of it inside) into compared spend per key of `by` and the not-compared rest."""
    filters = dict(filters or {})
    dims = list(dict.fromkeys([*by, *filters]))
    b = BillingCostRow.__table__.c  # type: ignore[attr-defined]
    cols = [b[_column(d)] for d in dims]
    kind = [b.source, b.provider, b.service, b.resource_id,
            func.coalesce(b.charge_category, "Usage")]
    inside = (b.charge_start >= since) & (b.charge_start < until) & (b.charge_end <= until)
    cut = (b.charge_start < until) & (b.charge_end > since) & ~inside
    where: list[ColumnElement[bool]] = []
    for dim, value in filters.items():
        if dim == "instance":
            continue  # matched on the instance a ResourceId names, below
        column = b[_column(dim)]
        where.append(func.coalesce(column, UNATTRIBUTED) == value)
    groups = [tuple(r) for r in session.execute(
        select(*cols, *kind, func.sum(b.billed_micros), func.sum(b.effective_micros),
               func.sum(b.lines)).where(inside, *where).group_by(*cols, *kind))]
    for cut_row in session.execute(select(
            *cols, *kind, b.billed_micros, b.effective_micros, b.lines, b.charge_start,
            b.charge_end).where(cut, *where)):
        share = _share(utc(cut_row[-2]), utc(cut_row[-1]), since, until)
        billed, effective = (round(int(v) * share) for v in cut_row[-5:-3])
        groups.append((*cut_row[:-5], billed, effective, cut_row[-3]))
    watched = inventory_of(session, {(str(r[len(dims) + 1]), iid) for r in groups
                                     if (iid := instance_ref(r[len(dims) + 3])) is not None})
    out = BilledComparison()
    other: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in groups:
        values = dict(zip(dims, r[:len(dims)], strict=True))
        source, provider, service, resource, category = r[len(dims):len(dims) + 5]
        billed, effective, lines = (int(v or 0) for v in r[len(dims) + 5:])
        iid = instance_ref(resource)
        values["instance"] = iid or resource
        if "instance" in filters and values["instance"] != filters["instance"]:
            continue
        out.bill_total_micros += billed
        if source == "aws-ce":
            _add(out.compared, by, values, billed)
        elif category == "Usage" and iid is not None and (str(provider), iid) in watched:
            _add(out.compared, by, values, effective)
        else:
            what = (str(category) if category != "Usage" else UNWATCHED if iid is not None
                    else str(service or "(no service named)"))
            kind_sums = other[(str(provider or "(none)"), what)]
            kind_sums[0] += billed
            kind_sums[1] += lines
    out.not_compared = sorted(
        (NotCompared(p, w, m, n) for (p, w), (m, n) in other.items()),
        key=lambda x: (-abs(x.billed_micros), x.provider, x.what))
    return out


def _share(start: datetime, end: datetime, since: datetime, until: datetime) -> float:
    """How much of [start, end) lies in [since, until)."""
    inside = (min(end, until) - max(start, since)).total_seconds()
    return max(0.0, inside) / (end - start).total_seconds()


def _add(compared: dict[tuple[str, ...], int], by: Sequence[str], values: Mapping[str, object],
         micros: int) -> None:
    key = tuple(str(values[d]) if values[d] is not None else UNATTRIBUTED for d in by)
    compared[key] = compared.get(key, 0) + micros
