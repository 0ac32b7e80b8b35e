"""Snoozes and stop requests from people (Slack buttons, `costguard snooze`), into the store.

Both only write state the act stage already reads: `PolicyStateRow.snooze_until` (the next
cycle holds the instance as snoozed) and, for "stop now", the warning's deadline and the end
of any snooze (the next cycle stops the instance if it is still idle and not protected).
Every request is journaled with who asked, whether or not it changed anything.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from costguard.actions import journal
from costguard.errors import CostguardError
from costguard.policy.base import format_duration
from costguard.store.inventory import to_instance
from costguard.store.tables import InstanceRow, PolicyStateRow

SNOOZABLE = ("seen", "warned", "snoozed")


class NothingToSnooze(CostguardError, LookupError):
    """No instance by that id, or no policy is watching it."""


def _instance(s: Session, instance_id: str, provider: str | None) -> InstanceRow:
    stmt = select(InstanceRow).where(InstanceRow.instance_id == instance_id)
    if provider:
        stmt = stmt.where(InstanceRow.provider == provider)
    rows = list(s.exec(stmt))
    if not rows:
        raise NothingToSnooze(f"no instance {instance_id!r} is known to costguard; check the id "
                              "(costguard report --by instance lists them)")
    if len(rows) > 1:
        providers = ", ".join(sorted(r.provider for r in rows))
        raise NothingToSnooze(f"{instance_id!r} exists at several providers ({providers}); "
                              "name the provider")
    return rows[0]


def snooze_instance(
    s: Session, *, instance_id: str, until: datetime, now: datetime, who: str, reason: str,
    max_snooze: timedelta, provider: str | None = None, policy: str | None = None,
) -> tuple[datetime, list[str]]:
    """Snooze the instance under every policy watching it (or `policy` only), capped at
    `now + max_snooze`. Returns the effective end and the policies snoozed."""
    inst_row = _instance(s, instance_id, provider)
    inst = to_instance(inst_row)
    capped = min(until, now + max_snooze)
    stmt = select(PolicyStateRow).where(
        PolicyStateRow.provider == inst_row.provider,
        PolicyStateRow.instance_id == instance_id,
        col(PolicyStateRow.state).in_(SNOOZABLE))
    if policy:
        stmt = stmt.where(PolicyStateRow.policy == policy)
    states = list(s.exec(stmt))
    if not states:
        raise NothingToSnooze(f"no policy is about to act on {instance_id}"
                              f"{f' under {policy}' if policy else ''}; nothing to snooze")
    note = "" if capped == until else f" (asked until {until:%Y-%m-%d %H:%M} UTC, capped at " \
                                       f"{format_duration(max_snooze)})"
    for st in states:
        st.snooze_until = capped
        s.add(st)
        journal.record(s, key=journal.journal_key(st.policy, inst, "snooze", st.episode),
                       cycle_id=None, policy=st.policy, inst=inst, action="snooze",
                       dry_run=False, status="requested",
                       detail=f"{who} snoozed until {capped:%Y-%m-%d %H:%M} UTC{note}: {reason}",
                       usd_per_hour=0.0, now=now)
    return capped, [st.policy for st in states]


def request_stop(s: Session, *, instance_id: str, policy: str, now: datetime, who: str,
                 provider: str | None = None) -> bool:
    """Make a warned or snoozed instance due now; True if it was either.

    The deadline moves to now and any snooze ends now (a past `snooze_until` also tells the
    act stage that this episode's snooze, tag included, is spent), so the next cycle stops
    the instance if it is still idle and not protected, exactly as at a deadline. Without
    ending the snooze, a click after "Snooze 4h" would only move a deadline the snooze hides.
    """
    inst_row = _instance(s, instance_id, provider)
    inst = to_instance(inst_row)
    st = s.get(PolicyStateRow, (policy, inst_row.provider, instance_id))
    due = st is not None and st.state in ("warned", "snoozed")
    ended = ""
    if due and st is not None:
        ended = " (its snooze ended)" if st.state == "snoozed" or (
            st.snooze_until is not None and st.snooze_until > now) else ""
        st.state, st.deadline, st.snooze_until = "warned", now, now
        s.add(st)
    state = st.state if st is not None else "not watched"
    detail = (f"{who} asked to stop it now{ended}; it stops at the next cycle if still idle"
              if due else f"{who} asked to stop it now; not acted on: policy state is {state}")
    journal.record(s, key=journal.journal_key(policy, inst, "stop-now",
                                              st.episode if st is not None else 0),
                   cycle_id=None, policy=policy, inst=inst, action="stop-now", dry_run=False,
                   status="requested", detail=detail, usd_per_hour=0.0, now=now)
    return due
