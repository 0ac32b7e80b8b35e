"""What imported bills say volumes, snapshots and addresses cost: a month at the rate of
their recent usage lines, preferred to the list price where there is one.

A snapshot's list price is an upper bound (the Standard tier bills changed blocks only), a
volume's misses its region's price and any discount: the bill knows. A line is matched to a
resource by its ResourceId, an EC2 ARN (`arn:aws:ec2:REGION:ACCOUNT:volume/vol-...`,
`:snapshot/snap-...`, `:elastic-ip/eipalloc-...`) or the bare id. The rate is the
EffectiveCost of the resource's Usage lines over the last `WINDOW` of the bill, divided by
the hours those lines cover (the union of their charge periods), times 730 hours; a
resource billed for less than a day of that window keeps its list price.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select
from sqlmodel import Session

from costguard.clock import utc
from costguard.model import HOURS_PER_MONTH
from costguard.store.bill_tables import BillingCostRow

WINDOW = timedelta(days=35)
MIN_HOURS = 24.0
_MARKERS = (":volume/", ":snapshot/", ":elastic-ip/")
_PREFIXES = ("vol-", "snap-", "eipalloc-")


def resource_ref(resource_id: str | None) -> str | None:
    """The volume, snapshot or allocation id a bill line's ResourceId names, or None."""
    if not resource_id:
        return None
    text = resource_id.strip()
    for marker in _MARKERS:
        if marker in text:
            text = text.rsplit(marker, 1)[1]
            break
    return text if text.startswith(_PREFIXES) and "/" not in text else None


def billed_monthly(session: Session, provider: str, now: datetime
                   ) -> dict[str, tuple[float, float]]:
    """Resource id -> (USD a month at its billed rate, hours of bill it rests on)."""
    b = BillingCostRow.__table__.c  # type: ignore[attr-defined]
    usage = func.coalesce(b.charge_category, "Usage") == "Usage"
    named = or_(*(b.resource_id.like(f"%{p}%") for p in _PREFIXES))
    lines: dict[str, list[tuple[datetime, datetime, int]]] = defaultdict(list)
    for resource, start, end, micros in session.execute(select(
            b.resource_id, b.charge_start, b.charge_end, b.effective_micros,
    ).where(usage, named, b.provider == provider, b.charge_start >= now - WINDOW)):
        ref = resource_ref(resource)
        if ref is not None:
            lines[ref].append((utc(start), utc(end), int(micros)))
    out: dict[str, tuple[float, float]] = {}
    for ref, found in lines.items():
        hours = _covered_hours([(s, e) for s, e, _ in found])
        if hours >= MIN_HOURS:
            usd = sum(m for _, _, m in found) / 1e6
            out[ref] = (max(0.0, usd / hours * HOURS_PER_MONTH), hours)
    return out


def _covered_hours(spans: list[tuple[datetime, datetime]]) -> float:
    """Hours in the union of the charge periods (overlapping lines counted once)."""
    total, reach = 0.0, None
    for start, end in sorted(spans):
        if reach is not None and start < reach:
            start = reach
        if end > start:
            total += (end - start).total_seconds() / 3600
            reach = end if reach is None else max(reach, end)
    return total
