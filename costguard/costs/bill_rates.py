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

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlmodel import Session

from costguard.costs.price_book import store_learned_rates
from costguard.model import Instance
from costguard.store.inventory import to_instance
from costguard.store.tables import BillingLineRow, CostIntervalRow, InstanceRow

SOURCE = "learned from the bill (EffectiveCost / hours run)"
_MIN_HOURS = 1.0


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
    b = BillingLineRow.__table__.c  # type: ignore[attr-defined]
    usage = (func.coalesce(b.charge_category, "Usage") == "Usage") & b.resource_id.isnot(None)
    billed: dict[tuple[str, str], list[tuple[datetime, datetime, int]]] = defaultdict(list)
    for provider, resource, start, end, micros in session.execute(select(
            b.provider, b.resource_id, b.charge_start, b.charge_end, b.effective_micros,
    ).where(usage, b.provider.in_(("aws", "gcp")))):
        iid = instance_ref(resource)
        if iid is not None:
            billed[(provider, iid)].append((start, end, int(micros)))
    result = LearnResult()
    rates: list[tuple[Instance, float, datetime]] = []
    for (provider, iid), lines in sorted(billed.items()):
        row = session.get(InstanceRow, (provider, iid))
        start, end = min(s for s, _, _ in lines), max(e for _, e, _ in lines)
        hours = _hours_run(session, provider, iid, start, end)
        if row is None or hours is None or hours < _MIN_HOURS:
            result.not_watched.append(f"{provider}:{iid}")
            continue
        rates.append((to_instance(row), sum(m for _, _, m in lines) / 1e6 / hours, end))
    result.learned = store_learned_rates(session, rates, SOURCE, now)
    return result


def _hours_run(session: Session, provider: str, iid: str, start: datetime,
               end: datetime) -> float | None:
    """Hours the instance ran within [start, end), or None unless costguard's intervals
    cover the whole of it."""
    c = CostIntervalRow.__table__.c  # type: ignore[attr-defined]
    mine = (c.provider == provider) & (c.instance_id == iid)
    first, last = session.execute(select(func.min(c.start), func.max(c.end)).where(mine)).one()
    if first is None or _utc(first) > start or _utc(last) < end:
        return None
    seconds = 0.0
    for s, e in session.execute(select(c.start, c.end).where(
            mine, c.state == "running", c.start < end, c.end > start)):
        seconds += (min(_utc(e), end) - max(_utc(s), start)).total_seconds()
    return seconds / 3600


def _utc(when: datetime) -> datetime:
    from costguard.clock import utc

    return utc(when)
