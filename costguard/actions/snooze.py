"""`costguard snooze`: an owner postpones every policy's action on one instance (or volume,
snapshot, address), for a while.

The snooze is written to each (policy, instance) state, capped by the policy's
`limits.max_snooze`, journaled with who and why, and mirrored to the instance's
`costguard:snooze-until` tag where the provider can set it (so people see it in the console).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from costguard.actions import journal
from costguard.actions.safety import SNOOZE_TAG
from costguard.errors import CostguardError, ProviderError
from costguard.model import ActionResult, Instance
from costguard.policy.evaluate import matches
from costguard.policy.schema import Limits, Policy, format_duration
from costguard.providers.base import Provider
from costguard.standing.evaluate import selects
from costguard.standing.model import HoldsStanding, Standing, from_row
from costguard.store.db import Database
from costguard.store.inventory import to_instance
from costguard.store.tables import InstanceRow, PolicyStateRow, StandingRow


class UnknownInstance(CostguardError, LookupError):
    def __init__(self, instance_id: str, why: str = "") -> None:
        super().__init__(why or f"no instance, volume, snapshot, address or reservation "
                         f"{instance_id!r} in the store: check the id, or run `costguard run "
                         "--once` so inventory knows it")


@dataclass(frozen=True)
class SnoozeResult:
    policy: str
    until: datetime
    cut: bool  # shortened to the policy's max_snooze


@dataclass(frozen=True)
class SnoozeReport:
    instance: Instance | Standing
    results: list[SnoozeResult]
    tag: str  # what happened to the snooze tag


def _target(s: Session, resource_id: str) -> Instance | Standing:
    """The instance, else the volume, snapshot, address or reservation, the store knows by
    this id (or, for those, by this name)."""
    rows = list(s.exec(select(InstanceRow).where(InstanceRow.instance_id == resource_id)))
    if rows:
        return to_instance(rows[0])
    held = list(s.exec(select(StandingRow).where(StandingRow.resource_id == resource_id,
                                                 col(StandingRow.gone).is_(False))))
    if not held:  # a persistent disk is known by a number: its name will do, if unique
        held = list(s.exec(select(StandingRow).where(StandingRow.name == resource_id,
                                                     col(StandingRow.gone).is_(False))))
        if len(held) > 1:
            raise UnknownInstance(resource_id, f"{len(held)} resources are named "
                                  f"{resource_id!r}: name one by id "
                                  f"({', '.join(r.resource_id for r in held[:5])})")
    if held:
        return from_row(held[0])
    raise UnknownInstance(resource_id)


def _tag(provider: Provider, target: Instance | Standing, tags: dict[str, str]
         ) -> ActionResult | None:
    if isinstance(target, Instance):
        return provider.set_tags(target, tags, dry_run=False)
    if isinstance(provider, HoldsStanding):
        return provider.tag_standing(target, tags, dry_run=False)
    return None


def snooze(db: Database, providers: Mapping[str, Provider], policies: Sequence[Policy],
           instance_id: str, duration: timedelta, reason: str, who: str, now: datetime, *,
           set_tag: bool = True) -> SnoozeReport:
    """Snooze every policy that selects `instance_id` (or already tracks it): an instance,
    or a volume, snapshot or address (costguard/standing/)."""
    if duration <= timedelta(0):
        raise ValueError("--for must be a positive duration, e.g. 4h")
    with db.session() as s:
        inst = _target(s, instance_id)
        tracked = {st.policy: st for st in s.exec(select(PolicyStateRow).where(
            PolicyStateRow.provider == inst.provider,
            PolicyStateRow.instance_id == inst.instance_id))}
        by_name = {p.name: p for p in policies}
        selecting = {p.name for p in policies
                     if (selects(p, inst, now) if isinstance(inst, Standing)
                         else matches(p, inst, now))}
        names = sorted(selecting | set(tracked))
        results: list[SnoozeResult] = []
        for name in names:
            limit = (by_name[name].limits if name in by_name else Limits()).max_snooze
            until = now + min(duration, limit)
            st = tracked.get(name) or PolicyStateRow(
                policy=name, provider=inst.provider, instance_id=inst.instance_id,
                state="seen", since=now, episode=1)
            st.snooze_until = until
            s.add(st)
            cut = duration > limit
            detail = (f"snoozed until {until.isoformat()} by {who}: {reason}"
                      + (f" (cut to max_snooze {format_duration(limit)})" if cut else ""))
            journal.record(s, key=f"{journal.journal_key(name, inst, 'snooze', st.episode)}"
                                  f"|cli|{now.isoformat()}", cycle_id=None, policy=name,
                           inst=inst, action="snooze", dry_run=False, status="done",
                           detail=detail, usd_per_hour=0.0, now=now)
            results.append(SnoozeResult(name, until, cut))
    tag = "not set (--no-tag)"
    if set_tag:
        provider = providers.get(inst.provider)
        if provider is None:
            tag = f"not set: provider {inst.provider} is not configured here"
        else:
            # the end the policies really keep (cut to max_snooze), not the one asked for
            until = max((r.until for r in results), default=now + duration)
            value = until.isoformat(timespec="seconds")
            try:
                result = _tag(provider, inst, {SNOOZE_TAG: value})
                tag = (f"{SNOOZE_TAG}={value} ({result.outcome})" if result is not None
                       else f"not set: {inst.provider} cannot tag it")
            except ProviderError as exc:
                tag = f"not set: {exc}"
    return SnoozeReport(inst, results, tag)
