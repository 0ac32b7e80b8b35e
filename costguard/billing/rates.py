"""Bills teach the estimates: the effective hourly rate of each instance, learned from its
imported usage lines.

An instance's rate is the EffectiveCost of its Usage lines (after Savings Plans, RIs, CUDs
and negotiated discounts) over the hours costguard saw it running in the same period, so
the hours come from one source for both clouds (GCP bills an instance as many SKU lines:
cores, memory, GPUs) and a partial hour is not counted whole. Lines are matched to an
instance by their ResourceId: an EC2 ARN (`arn:aws:ec2:REGION:ACCOUNT:instance/i-...`), a
bare instance id, or a Compute Engine global name (`//compute.googleapis.com/projects/P/
zones/Z/instances/ID`). An instance is learned only when costguard watched it over the
whole billed period and saw it run at least an hour; otherwise it keeps its list price.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlmodel import Session

from costguard.clock import utc
from costguard.costs.price_book import store_learned_rates
from costguard.model import MAX_USD_PER_HOUR, Instance
from costguard.store.bill_tables import BillingCostRow
from costguard.store.inventory import current_instances
from costguard.store.tables import CostIntervalRow

log = logging.getLogger(__name__)
SOURCE = "learned from the bill (EffectiveCost / hours run)"
_MIN_HOURS = 1.0
_CHUNK = 500  # instance ids per IN (...) list


def instance_ref(resource_id: str | None) -> str | None:
    """The instance id a bill line's ResourceId names, or None for anything else."""
    if not resource_id:
        return None
    text = resource_id.strip()
    for marker in (":instance/", "/instances/"):
        if marker in text:
            return text.rsplit(marker, 1)[1].split("/", 1)[0] or None
    return text if text.startswith("i-") and "/" not in text else None


@dataclass
class LearnResult:
    learned: int = 0
    not_watched: list[str] = field(default_factory=list)  # billed, not seen over the period


def learn_rates(session: Session, now: datetime) -> LearnResult:
    """Learn each billed instance's effective hourly rate and keep it in the price book."""
    b = BillingCostRow.__table__.c  # type: ignore[attr-defined]
    usage = (func.coalesce(b.charge_category, "Usage") == "Usage") & b.resource_id.isnot(None)
    billed: dict[tuple[str, str], list[tuple[datetime, datetime, int]]] = defaultdict(list)
    for provider, resource, start, end, micros in session.execute(select(
            b.provider, b.resource_id, b.charge_start, b.charge_end, b.effective_micros,
    ).where(usage, b.provider.in_(("aws", "gcp")))):
        iid = instance_ref(resource)
        if iid is not None:
            billed[(provider, iid)].append((utc(start), utc(end), int(micros)))
    watched = _intervals(session, set(billed))
    known = inventory_of(session, set(billed))
    result = LearnResult()
    rates: list[tuple[Instance, float, datetime]] = []
    for (provider, iid), lines in sorted(billed.items()):
        inst = known.get((provider, iid))
        start, end = min(s for s, _, _ in lines), max(e for _, e, _ in lines)
        hours = _hours_run(watched.get((provider, iid), []), start, end)
        if inst is None or hours is None or hours < _MIN_HOURS:
            result.not_watched.append(f"{provider}:{iid}")
            continue
        rate = sum(m for _, _, m in lines) / 1e6 / hours
        if not 0 <= rate <= MAX_USD_PER_HOUR:  # a broken line, not a price: not learned
            log.warning("not learned from the bill: %s:%s at %.2f USD/h (EffectiveCost "
                        "%s to %s over %.1f h run)", provider, iid, rate,
                        f"{start:%Y-%m-%d %H:%M}", f"{end:%Y-%m-%d %H:%M}", hours)
            continue
        rates.append((inst, rate, end))
    result.learned = store_learned_rates(session, rates, SOURCE, now)
    return result


def inventory_of(session: Session, keys: set[tuple[str, str]]
                 ) -> dict[tuple[str, str], Instance]:
    """The instances of `keys` (provider, instance id) that costguard keeps in its inventory,
    gone ones included (a bill can name an instance that has since been terminated)."""
    return {(i.provider, i.instance_id): i for i in current_instances(
        session, include_gone=True, instance_ids={iid for _, iid in keys})
        if (i.provider, i.instance_id) in keys}


_Interval = tuple[datetime, datetime, bool]  # start, end, running


def _intervals(session: Session, keys: set[tuple[str, str]]
               ) -> dict[tuple[str, str], list[_Interval]]:
    """The cost intervals of the billed instances, read in a few statements."""
    c = CostIntervalRow.__table__.c  # type: ignore[attr-defined]
    out: dict[tuple[str, str], list[_Interval]] = defaultdict(list)
    ids = sorted({iid for _, iid in keys})
    for i in range(0, len(ids), _CHUNK):
        for provider, iid, start, end, state in session.execute(select(
                c.provider, c.instance_id, c.start, c.end, c.state,
        ).where(c.instance_id.in_(ids[i:i + _CHUNK]))):
            if (provider, iid) in keys:
                out[(provider, iid)].append((utc(start), utc(end), state == "running"))
    return out


def _hours_run(intervals: list[_Interval], start: datetime, end: datetime) -> float | None:
    """Hours run within [start, end), or None unless the intervals cover the whole of it."""
    covered = bool(intervals) and (min(s for s, _, _ in intervals) <= start
                                   and max(e for _, e, _ in intervals) >= end)
    if not covered:
        return None
    seconds = sum((min(e, end) - max(s, start)).total_seconds()
                  for s, e, running in intervals if running and s < end and e > start)
    return seconds / 3600
