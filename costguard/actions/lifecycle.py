"""What happens to an instance after a policy stopped it: started again, or terminated.

`start: {at_office_hours: true}` starts what the policy stopped once office hours begin.
`terminate: {after_stopped: 7d}` warns `warn_before` the end and then terminates what has
stayed stopped since costguard stopped it. Only instances whose last state change was
costguard's own stop qualify: a box its owner started (or started and stopped again by
hand) is no longer the policy's to terminate. Both journal intent before the provider call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlmodel import Session, col, select

from costguard.actions import journal
from costguard.actions.messages import label, recipients, snooze_hint
from costguard.actions.safety import (
    batch_verdict,
    is_protected,
    pet_refusal,
    recheck,
    snoozed_until,
)
from costguard.actions.schedule import in_office_hours
from costguard.alerts.outbox import enqueue
from costguard.errors import ProviderError
from costguard.model import ActionResult, Instance, InstanceState
from costguard.policy.schema import Policy, format_duration
from costguard.store.inventory import set_state, to_instance
from costguard.store.tables import ActionJournalRow, InstanceRow, PolicyStateRow

if TYPE_CHECKING:
    from costguard.actions.runner import ActionRunner
    from costguard.actions.stats import ActStats

log = logging.getLogger("costguard.act")

# a stop we made sets state_changed_at to the same `now` as the policy state's `since`
_SAME_STOP = timedelta(seconds=1)


@dataclass
class _Due:
    inst: Instance
    st: PolicyStateRow
    usd_per_hour: float


class AfterStop:
    def __init__(self, runner: ActionRunner) -> None:
        self.r = runner

    def run(self, policy: Policy, now: datetime, cycle_id: int | None, stats: ActStats) -> None:
        self.r.rechecks.clear()  # starts and terminations change what a re-check read
        starts: list[_Due] = []
        terms: list[_Due] = []
        with self.r.db.session() as s:
            states = list(s.exec(select(PolicyStateRow).where(
                PolicyStateRow.policy == policy.name,
                col(PolicyStateRow.state).in_(["acted", "term-warned"]))))
            _load_instances(s, [st.instance_id for st in states])  # s.get below: no SELECT
            for st in states:
                row = s.get(InstanceRow, (st.provider, st.instance_id))
                if row is None:
                    continue
                inst = to_instance(row)
                usd = self._usd(inst)
                if row.gone or row.state == InstanceState.TERMINATED:
                    st.state, st.since, st.deadline = "terminated", now, None
                    s.add(st)
                elif policy.start_action is not None:
                    if self._start_due(s, policy, st, row, now, cycle_id, stats):
                        starts.append(_Due(inst, st, usd))
                elif (policy.terminate_action is not None and policy.is_enforced
                      and self._terminate_due(s, policy, st, row, inst, now, cycle_id)):
                    terms.append(_Due(inst, st, usd))
        for action, due in (("start", starts), ("terminate", terms)):
            if due and self._within_caps(policy, action, due, now, cycle_id, stats):
                for d in due:
                    self._act(policy, action, d, now, cycle_id, stats)

    def _usd(self, inst: Instance) -> float:
        provider = self.r.providers.get(inst.provider)
        running = inst.model_copy(update={"state": InstanceState.RUNNING})
        try:
            quote = provider.price(running) if provider else None
        except ProviderError:
            quote = None
        return quote.usd_per_hour if quote else 0.0

    # -- start at office hours --------------------------------------------------------------
    def _start_due(self, s: Session, policy: Policy, st: PolicyStateRow, row: InstanceRow,
                   now: datetime, cycle_id: int | None, stats: ActStats) -> bool:
        hours = policy.condition.outside_hours
        assert hours is not None and policy.start_action is not None
        if not policy.start_action.at_office_hours or not in_office_hours(hours, now):
            return False
        if not policy.is_enforced:  # the dry-run stop changed nothing, so nothing to start
            journal.record(s, key=journal.journal_key(policy.name, to_instance(row), "start",
                           st.episode), cycle_id=cycle_id, policy=policy.name,
                           inst=to_instance(row), action="start", dry_run=True,
                           status="dry-run", detail="would start: office hours began",
                           usd_per_hour=0.0, now=now)
            stats.dry_run[policy.name] += 1
            st.state, st.since = "cleared", now
            s.add(st)
            return False
        if row.state != InstanceState.STOPPED or row.state_changed_at > st.since + _SAME_STOP:
            st.state, st.since = "cleared", now  # someone else started or re-stopped it
            s.add(st)
            return False
        return True

    # -- terminate after N days stopped -----------------------------------------------------
    def _terminate_due(self, s: Session, policy: Policy, st: PolicyStateRow, row: InstanceRow,
                       inst: Instance, now: datetime, cycle_id: int | None) -> bool:
        term = policy.terminate_action
        assert term is not None
        if row.state != InstanceState.STOPPED or row.state_changed_at > st.since + _SAME_STOP:
            if st.state == "term-warned" or row.state != InstanceState.STOPPED:
                st.state, st.since, st.deadline = "cleared", now, None
                s.add(st)
            return False
        snoozed = max(filter(None, [snoozed_until(inst), st.snooze_until]), default=None)
        if is_protected(inst) or (snoozed is not None and snoozed > now):
            if st.state == "term-warned":  # warn afresh once the snooze or protection ends
                st.state, st.deadline = "acted", None
                s.add(st)
            return False
        if st.state == "acted":
            terminate_at = st.since + term.after_stopped
            if now < terminate_at - term.warn_before:
                return False
            # a late warning (policy added later, daemon down) still gives the full notice
            deadline = max(terminate_at, now + term.warn_before)
            self._warn(s, policy, st, inst, deadline, now, cycle_id)
            st.state, st.deadline = "term-warned", deadline
            s.add(st)
            return False
        return st.deadline is not None and now >= st.deadline

    def _warn(self, s: Session, policy: Policy, st: PolicyStateRow, inst: Instance,
              deadline: datetime, now: datetime, cycle_id: int | None) -> None:
        term = policy.terminate_action
        assert term is not None
        team = self.r.attributor.dimensions(inst).get("team")
        key = journal.journal_key(policy.name, inst, "term-notice", st.episode)
        subject = (f"{label(inst)} will be TERMINATED at {deadline:%Y-%m-%d %H:%M} UTC "
                   f"({policy.name})")
        body = "\n".join([
            f"It has been stopped since {st.since.isoformat()} "
            f"(terminate after {format_duration(term.after_stopped)} stopped).",
            "Its disks are snapshotted first." if term.snapshot else
            "Its disks are NOT snapshotted: their data will be lost.",
            "Start it, tag it costguard:protect, or " + snooze_hint(inst) + " to keep it.",
        ])
        enqueue(s, dedupe_key=key, kind="terminate-warning", severity="warning", now=now,
                subject=subject, body=body, recipients=recipients(("owner", "team"), inst, team),
                policy=policy.name, provider=inst.provider, instance_id=inst.instance_id,
                team=team, owner=inst.tags.get("owner"),
                context={"deadline": deadline.isoformat(), "snapshot": term.snapshot})
        journal.record(s, key=key, cycle_id=cycle_id, policy=policy.name, inst=inst,
                       action="notify", dry_run=False, status="done", detail=subject,
                       usd_per_hour=0.0, now=now)

    # -- shared -----------------------------------------------------------------------------
    def _within_caps(self, policy: Policy, action: str, due: list[_Due], now: datetime,
                     cycle_id: int | None, stats: ActStats) -> bool:
        verdict = batch_verdict([d.usd_per_hour for d in due], policy.limits, self.r.budget)
        if not verdict.allowed:
            self.r.refuse(policy, [(d.inst, d.st.episode, d.usd_per_hour) for d in due],
                          action, verdict, now, cycle_id, stats)
        return verdict.allowed

    def _act(self, policy: Policy, action: str, d: _Due, now: datetime, cycle_id: int | None,
             stats: ActStats) -> None:
        key = journal.journal_key(policy.name, d.inst, action, d.st.episode)
        provider = self.r.providers.get(d.inst.provider)
        call = self._call(action, policy, provider)
        with self.r.db.session() as s:
            if journal.completed(s, key) or _recorded(s, key + "|unsupported"):
                return
            if call is None:
                journal.record(s, key=key + "|unsupported", cycle_id=cycle_id,
                               policy=policy.name, inst=d.inst, action=action,
                               dry_run=False, status="skipped",
                               detail=f"{action} is not wired for {d.inst.provider} yet; "
                                      "the instance stays as it is",
                               usd_per_hour=d.usd_per_hour, now=now)
                stats.skipped[policy.name] += 1
                return
            intent_id = journal.write_intent(
                s, key=key, cycle_id=cycle_id, policy=policy.name, inst=d.inst, action=action,
                dry_run=False, usd_per_hour=d.usd_per_hour, now=now).id or 0
        self.r.fault("after-intent")
        target, why_not = (d.inst, None)
        if self.r.safety.recheck_before_acting:
            target, why_not = recheck(provider, d.inst, now, want=InstanceState.STOPPED)
        why_not = why_not or pet_refusal(target, action)
        result: ActionResult | None = None
        if why_not is None:
            try:
                result = call(target)
                status, detail = str(result.outcome), result.detail or f"{action}ed"
            except ProviderError as exc:
                status, detail = "failed", str(exc)
        else:
            status, detail = "skipped", f"re-check before {action}: {why_not}"
        self.r.fault("after-call")
        with self.r.db.session() as s:
            journal.resolve(s, intent_id, status, detail, now)
            st = s.merge(d.st)
            if status == "done":
                new = InstanceState.RUNNING if action == "start" else InstanceState.TERMINATED
                set_state(s, d.inst, new, now)
                st.state, st.since, st.deadline = (
                    "cleared" if action == "start" else "terminated"), now, None
                verb = "started" if action == "start" else "terminated"
                (stats.started if action == "start" else stats.terminated)[policy.name] += 1
                self.r._action_alert(s, policy.name, d.inst, d.st.episode, verb,
                                     detail, now)
            else:
                stats.skipped[policy.name] += 1
                if result is not None or why_not is not None:
                    st.state, st.since, st.deadline = "cleared", now, None
            s.add(st)
        log.info("%s %s (%s): %s %s", action, label(d.inst), policy.name, status, detail)

    @staticmethod
    def _call(action: str, policy: Policy, provider: object
              ) -> Callable[[Instance], ActionResult] | None:
        if provider is None:
            return None
        if action == "start":
            start = getattr(provider, "start")  # noqa: B009 - provider is typed loosely here
            return lambda inst: start(inst, dry_run=False)
        terminate = getattr(provider, "terminate", None)  # optional capability
        if terminate is None:
            return None
        term = policy.terminate_action
        assert term is not None
        return lambda inst: terminate(inst, snapshot=term.snapshot, dry_run=False)


def _recorded(s: Session, key: str) -> bool:
    found = s.exec(select(ActionJournalRow.id).where(ActionJournalRow.key == key)).first()
    return found is not None


def _load_instances(s: Session, instance_ids: list[str], chunk: int = 500) -> None:
    """Bring the instance rows of `instance_ids` into the session's identity map with one
    SELECT per `chunk` ids, so each `s.get` of them is answered without a query."""
    for first in range(0, len(instance_ids), chunk):
        list(s.exec(select(InstanceRow).where(
            col(InstanceRow.instance_id).in_(instance_ids[first : first + chunk]))))
