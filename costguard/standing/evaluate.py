"""Does a volume, snapshot, address or reservation policy select a resource, and does its
condition hold?

Pure functions over stored values; the standing stage does the I/O. Unused time counts from
`since` (standing/stage.py: the cloud's word, else costguard's first sight of it unused);
a resource without one is in use, and never a finding of `unused`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from costguard.policy.evaluate import age_matches, tags_match
from costguard.policy.filters import Filters
from costguard.policy.schema import Policy
from costguard.standing.model import Standing, StandingKind


@dataclass(frozen=True)
class StandingFinding:
    """One policy on one resource its filters selected; `holds` when every condition does."""

    policy: Policy
    item: Standing
    holds: bool
    reason: str

    @property
    def usd_per_month(self) -> float:
        return self.item.usd_per_month or 0.0


def selects(policy: Policy, item: Standing, now: datetime) -> bool:
    """True when the policy's kind, providers and filters select `item`."""
    if policy.resource != item.kind or item.provider not in policy.providers:
        return False
    return _filters(policy.filters, item, now)


def _filters(f: Filters, item: Standing, now: datetime) -> bool:
    if f.accounts is not None and item.account not in f.accounts:
        return False
    if f.regions is not None and item.region not in f.regions:
        return False
    if f.tags is not None and not tags_match(f.tags, item.tags):
        return False
    if f.age is not None and (item.created_at is None  # unknown: no age can be vouched for
                              or not age_matches(f.age, now - item.created_at)):
        return False
    return f.attached is None or f.attached == item.attached


def evaluate(policy: Policy, item: Standing, now: datetime) -> StandingFinding | None:
    """The finding of `policy` on `item` (as stored: unused since when costguard knows),
    or None when its filters do not select it."""
    if not selects(policy, item, now):
        return None
    c = policy.condition
    reasons: list[str] = []
    holds = True
    since = None if item.in_use else item.unused_since
    if c.unused is not None:
        if since is not None and now - since >= c.unused.for_:
            reasons.append(unused_words(item, now - since))
        else:
            holds = False
    if c.missing_tags is not None:
        missing = [k for k in c.missing_tags if k not in item.tags]
        if missing:
            reasons.append(f"missing tag {', '.join(missing)}")
        else:
            holds = False
    return StandingFinding(policy, item, holds, "; ".join(reasons) if holds else "")


def unused_words(item: Standing, span: timedelta) -> str:
    """`attached to nothing for 34d`: why a resource counts as unused, and for how long."""
    took = f"{span.days}d" if span.days else f"{int(span.total_seconds() // 3600)}h"
    if item.kind is StandingKind.VOLUME:
        what = (f"attached only to stopped {', '.join(item.used_by)}" if item.used_by
                else "attached to nothing")
    elif item.reservation is not None:
        r = item.reservation
        beside = (f"; on demand beside it, could run in it: {', '.join(r.twins)}"
                  if r.twins else "")
        return (f"{r.unused} of {r.capacity} reserved {r.instance_type} unused now, part of "
                f"it unused for {took}{beside}")
    elif item.kind is StandingKind.SNAPSHOT:
        what = "needed by no image, launch template or volume"
    else:
        what = (f"associated only with stopped {', '.join(item.used_by)}" if item.used_by
                else "associated with nothing")
    return f"{what} for {took}"
