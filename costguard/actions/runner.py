"""The act stage: per (policy, instance) state machine, seen -> warned -> acted | snoozed | cleared.

Every stop is journaled as an intent (committed) before the provider call and resolved after,
so a crash at any point neither repeats a stop nor loses its trace: the next cycle reconciles
unresolved intents against what inventory now shows before anything else happens.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from sqlmodel import Session, select

from costguard.actions import controllers, journal, prestop, recovery
from costguard.actions.batch import (
    BatchStop,
    BatchTags,
    Rechecks,
    batch_capable,
    spanning_regions,
    stops_ahead,
)
from costguard.actions.bulk import NewState, Rows, Settled, State, stored_states
from costguard.actions.lanes import Store, lanes, side_by_side
from costguard.actions.lifecycle import AfterStop
from costguard.actions.managed import ScaleIn, acting_step, refused_as_pet, report_member
from costguard.actions.messages import (
    action_alert,
    after_stop_note,
    label,
    notice,
    recipients,
    render,
    warning,
)
from costguard.actions.parking import GroupParking, parks
from costguard.actions.safety import (
    Budget,
    CapVerdict,
    CycleBudget,
    batch_verdict,
    is_protected,
    pet_refusal,
    recheck,
    snooze_limit,
    snoozed_until,
)
from costguard.actions.schedule import business_deadline
from costguard.actions.settings import SafetySettings
from costguard.actions.spot import record_interruptions, spot_saving
from costguard.actions.stats import ActStats
from costguard.alerts.outbox import enqueue
from costguard.costs.attribution import Attributor
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance, InstanceState
from costguard.policy.evaluate import Finding
from costguard.policy.schema import Policy
from costguard.providers.base import Provider
from costguard.store.db import Database
from costguard.store.tables import InstanceRow

log = logging.getLogger("costguard.act")

FaultHook = Callable[[str], None]  # called at named points; tests crash the cycle there
Ref = tuple[str, str]


class ActionRunner:
    def __init__(
        self, db: Database, providers: Mapping[str, Provider], attributor: Attributor,
        fault: FaultHook | None = None, *, safety: SafetySettings | None = None,
    ) -> None:
        self.db: Store = db
        self.providers = providers
        self.attributor = attributor
        self.fault = fault or (lambda point: None)
        self.safety = safety or SafetySettings()
        self.budget: Budget = CycleBudget(None, None)
        self._changed_at: dict[Ref, datetime] = {}
        self.tag_batch = BatchTags(self)  # tag requests of batch-capable providers
        self._capable: dict[str, tuple[Provider, bool]] = {}  # `batch_capable`'s answers
        self.wide = spanning_regions(providers)  # scoped per account, not per region
        # the act stage's re-checks, new per run; its parts (AfterStop) may run without one
        self.rechecks = self._no_rechecks()
        # journal entries, findings and alerts of the policy's session (new per policy)
        self.rows: Rows

    def batch_capable(self, name: str) -> bool:
        """Whether provider `name` re-checks and acts on many instances per call
        (`batch.batch_capable`), asked once per provider object: an isinstance of two runtime
        protocols walks their members, and asked per instance acted on it was ~1 % of a
        first cycle's CPU at organisation scale."""
        provider = self.providers[name]
        held = self._capable.get(name)
        if held is None or held[0] is not provider:
            held = self._capable[name] = (provider, batch_capable(provider))
        return held[1]

    def _no_rechecks(self) -> Rechecks:
        """Re-checks outside an act stage: none read ahead, none kept yet."""
        return Rechecks(self.safety.recheck_reuse_seconds, wide=self.wide)

    # -- recovery ---------------------------------------------------------------------
    def reconcile(self, now: datetime, stats: ActStats) -> None:
        """Resolve what a crash or a failed call left open (see `actions.recovery`)."""
        recovery.reconcile(self, now, stats)

    # -- the state machine ----------------------------------------------------------------
    def run(self, policies: Sequence[Policy], findings: Sequence[Finding], now: datetime,
            cycle_id: int | None) -> ActStats:
        stats = ActStats()
        self.budget = CycleBudget(self.safety.max_actions_per_cycle,
                                  self.safety.max_usd_per_hour_per_cycle)
        self.rechecks = Rechecks(self.safety.recheck_reuse_seconds,  # this stage's own
                                 stops_ahead(policies, findings), wide=self.wide)
        try:
            self._run(policies, findings, now, cycle_id, stats)
        finally:
            # what this run read (every instance's last state change, the instances its
            # re-checks read or will) is not kept for the next one: between cycles it only
            # held memory (at 100,000 instances, tens of MB)
            self._changed_at = {}
            self.rechecks = self._no_rechecks()
        return stats

    def _run(self, policies: Sequence[Policy], findings: Sequence[Finding], now: datetime,
             cycle_id: int | None, stats: ActStats) -> None:
        self.reconcile(now, stats)
        with self.db.session() as s:
            stats.interruptions = record_interruptions(s, now, cycle_id)
            stats.replaced = controllers.verify(s, now)  # groups shrunk in earlier cycles
            self._changed_at = {(p, i): changed for p, i, changed in s.exec(select(
                InstanceRow.provider, InstanceRow.instance_id, InstanceRow.state_changed_at))}
        by_policy: dict[str, list[Finding]] = defaultdict(list)
        for f in findings:
            by_policy[f.policy.name].append(f)

        def run_one(runner: ActionRunner, policy: Policy, counts: ActStats) -> None:
            runner._run_policy(policy, by_policy.get(policy.name, []), now, cycle_id, counts)
            if policy.start_action is not None or policy.terminate_action is not None:
                AfterStop(runner).run(policy, now, cycle_id, counts)

        groups = lanes(policies)
        if len(groups) > 1:  # clouds side by side (actions/lanes.py)
            side_by_side(self, policies, groups, run_one, stats)
        else:
            for policy in policies:
                run_one(self, policy, stats)

    def _run_policy(self, policy: Policy, findings: list[Finding], now: datetime,
                    cycle_id: int | None, stats: ActStats) -> None:
        selected: set[Ref] = set()
        due: list[tuple[Finding, State]] = []
        parked: list[Finding] = []
        # warnings, snoozes and clears of one policy commit together; stops (below) each
        # get their own intent transaction before the provider is called
        self.rows = Rows()
        with self.db.session() as s:
            # stored states as plain objects: `rows.write` updates the changed ones and
            # inserts the new ones, in this session's transaction
            stored = stored_states(s, policy.name)
            self.rows.keep(stored)
            states: dict[Ref, State] = {(st.provider, st.instance_id): st for st in stored}
            for f in findings:
                ref = (f.instance.provider, f.instance.instance_id)
                selected.add(ref)
                st = states.get(ref)
                if not f.holds:
                    if st is not None and st.state in ("warned", "acted", "snoozed", "protected",
                                                       "managed"):
                        self._clear(policy, f, st, now, stats)
                    continue
                st = self._ensure_state(policy, f, st, now, self._changed_at.get(ref))
                if is_protected(f.instance):
                    if st.state != "protected":
                        st.state, st.since, st.deadline = "protected", now, None
                        self.rows.record(key=journal.journal_key(policy.name, f.instance,
                                         "skip", st.episode), cycle_id=cycle_id,
                                         policy=policy.name, inst=f.instance, action="skip",
                                         dry_run=not policy.is_enforced, status="skipped",
                                         detail="costguard:protect tag: never acted on",
                                         usd_per_hour=f.usd_per_hour, now=now)
                        stats.skipped[policy.name] += 1
                    continue
                if st.state == "protected":  # the tag was removed: start afresh
                    st.state, st.since = "seen", now
                if parks(policy, f.instance):
                    parked.append(f)  # its whole group is parked, below
                    continue
                if refused_as_pet(policy, f.instance):
                    report_member(self, policy, f, st, now, stats, cycle_id)
                    continue
                if st.state == "managed":  # now a plain instance, or the policy scales in
                    st.state, st.since = "seen", now
                if self._snoozed(s, policy, f, st, now, stats, cycle_id):
                    continue
                if st.state == "seen":
                    self._start_episode(s, policy, f, st, now, stats, cycle_id)
                if st.state == "warned" and st.deadline is not None and now >= st.deadline:
                    due.append((f, st))
                self.rows.spill(s)  # bounded: a fleet's worth is not held to the end
            # pairs whose instance the policy no longer selects (stopped, retagged, gone)
            for pair, st in states.items():
                if pair not in selected and st.state == "warned":
                    st.state, st.since, st.deadline = "cleared", now, None
                    stats.cleared[policy.name] += 1
            self.tag_batch.flush(now, cycle_id, stats)  # batched tags, inside the session
            self.rows.write(s)
        if due:
            self._act_on_due(policy, due, now, cycle_id, stats)
        if policy.scale_to_zero_action is not None:
            GroupParking(self).run(policy, parked, now, cycle_id, stats)

    def _ensure_state(self, policy: Policy, f: Finding, st: State | None,
                      now: datetime, changed_at: datetime | None) -> State:
        restarted = (st is not None and st.state == "acted" and changed_at is not None
                     and changed_at > st.since)
        if st is None:
            st = NewState(policy=policy.name, provider=f.instance.provider,
                          instance_id=f.instance.instance_id, state="seen", since=now,
                          episode=1)
            self.rows.states.append(st)
        elif st.state in ("cleared", "terminated") or restarted:
            # a snooze set ahead of time (`costguard snooze`) outlives the reset
            keep = st.snooze_until if st.snooze_until and st.snooze_until > now else None
            st.state, st.since, st.deadline, st.snooze_until = "seen", now, None, keep
            st.episode += 1
        st.evidence = f.evidence
        return st

    def _snoozed(self, s: Session, policy: Policy, f: Finding, st: State,
                 now: datetime, stats: ActStats, cycle_id: int | None) -> bool:
        tag_until = snoozed_until(f.instance)
        spent = st.snooze_until is not None and st.snooze_until <= now
        if spent and st.state != "snoozed":
            tag_until = None  # this episode's tag snooze ran out at max_snooze: not again
        stored = st.snooze_until if st.snooze_until and st.snooze_until > now else None
        until = max(filter(None, [tag_until, stored]), default=None)
        if until is not None:
            began = st.since if st.state == "snoozed" else now
            limited = snooze_limit(until, began, policy.limits.max_snooze)
            if limited > now:
                if st.state != "snoozed":
                    cut = (f" (cut from {until.isoformat()} to the policy's max_snooze)"
                           if limited < until else "")
                    st.state, st.since, st.snooze_until, st.deadline = (
                        "snoozed", now, limited, None)
                    self.rows.record(key=journal.journal_key(policy.name, f.instance,
                                     "snooze", st.episode), cycle_id=cycle_id,
                                     policy=policy.name, inst=f.instance, action="snooze",
                                     dry_run=not policy.is_enforced, status="skipped",
                                     detail=f"snoozed until {limited.isoformat()}{cut}",
                                     usd_per_hour=f.usd_per_hour, now=now)
                    stats.skipped[policy.name] += 1
                return True
            st.snooze_until = limited
        if st.state == "snoozed":  # expired: a fresh warning, a fresh deadline
            # snooze_until stays as a marker (in the past) that this episode's snooze is spent
            st.state, st.since = "seen", now
            st.episode += 1
        return False

    def _start_episode(self, s: Session, policy: Policy, f: Finding, st: State,
                       now: datetime, stats: ActStats, cycle_id: int | None) -> None:
        dry = not policy.is_enforced
        team = self.attributor.dimensions(f.instance).get("team")
        self.rows.finding(cycle_id=cycle_id, policy=policy.name, inst=f.instance,
                          observed_at=now, reason=f.reason, evidence=f.evidence,
                          usd_per_hour=f.usd_per_hour, team=team)
        stop = acting_step(policy, f.instance)
        deadline = (business_deadline(stop.calendar, now, stop.grace) if stop and stop.calendar
                    else now + (stop.grace if stop else timedelta(0)))
        notify = policy.notify_action
        if notify is not None:
            # priced only for a notice: a price not read yet is an API call (spot.py)
            saving = spot_saving(self.providers, f.instance)
            text = render(notify.message, f, deadline if stop else None, saving)
            subject, body = warning(f, deadline, text) if stop else notice(f, text)
            key = journal.journal_key(policy.name, f.instance, "notify", st.episode)
            if not dry:
                self.rows.alert(
                    dedupe_key=key, kind="idle-warning" if stop else "finding",
                    severity="warning" if stop else "info", subject=subject, body=body,
                    now=now, recipients=recipients(notify.to, f.instance, team),
                    policy=policy.name, provider=f.instance.provider,
                    instance_id=f.instance.instance_id, team=team,
                    owner=f.instance.tags.get("owner"),
                    context={"reason": f.reason, "evidence": f.evidence,
                             "usd_per_hour": f.usd_per_hour,
                             "deadline": deadline.isoformat() if stop else None,
                             "spot_savings_usd_per_hour": saving,
                             "instance_type": f.instance.instance_type})
            self.rows.record(key=key, cycle_id=cycle_id, policy=policy.name, inst=f.instance,
                             action="notify", dry_run=dry, status="dry-run" if dry else "done",
                             detail=subject, usd_per_hour=f.usd_per_hour, now=now)
            (stats.dry_run if dry else stats.notified)[policy.name] += 1
        if policy.tag_action is not None:
            self._tag(policy, f, st, now, stats, cycle_id, deadline if stop else None)
        if stop is not None:
            st.state, st.since, st.deadline = "warned", now, deadline
            stats.warned[policy.name] += 1
        else:
            st.state, st.since = "acted", now

    def _tag(self, policy: Policy, f: Finding, st: State, now: datetime,
             stats: ActStats, cycle_id: int | None, deadline: datetime | None) -> None:
        action = policy.tag_action
        assert action is not None
        stamp = deadline.isoformat(timespec="seconds") if deadline else ""
        # overwrite: false keeps a key the instance carries (a since-marker's first time)
        tags = {k: v.format(now=now.isoformat(timespec="seconds"), policy=policy.name,
                            deadline=stamp) for k, v in action.set_.items()
                if action.overwrite or k not in f.instance.tags}
        if not tags and not action.remove:
            return
        dry = not policy.is_enforced
        key = journal.journal_key(policy.name, f.instance, "tag", st.episode)
        if self.batch_capable(f.instance.provider):
            self.tag_batch.add(policy.name, f, key, tags, tuple(action.remove), dry)
            return
        try:
            result = self.providers[f.instance.provider].set_tags(
                f.instance, tags, remove=tuple(action.remove), dry_run=dry)
            status, detail = str(result.outcome), result.detail or f"set {tags}"
        except ProviderError as exc:
            status, detail = "failed", str(exc)
        self.rows.record(key=key, cycle_id=cycle_id, policy=policy.name, inst=f.instance,
                         action="tag", dry_run=dry, status=status, detail=detail,
                         usd_per_hour=f.usd_per_hour, now=now)
        (stats.dry_run if dry else stats.tagged)[policy.name] += 1

    def _act_on_due(self, policy: Policy, due: list[tuple[Finding, State]],
                    now: datetime, cycle_id: int | None, stats: ActStats) -> None:
        due = prestop.gate(self, policy, due, now, cycle_id, stats)  # hooks run first
        if not due:
            return
        verdict = batch_verdict([f.usd_per_hour for f, _ in due], policy.limits, self.budget)
        members = [(f, st) for f, st in due if f.instance.owner is not None]
        pets = [(f, st) for f, st in due if f.instance.owner is None]
        if not verdict.allowed:
            for action, batch in (("stop", pets), ("scale_in", members)):
                if batch:
                    self.refuse(policy, [(f.instance, st.episode, f.usd_per_hour)
                                         for f, st in batch], action, verdict, now, cycle_id,
                                stats)
            return
        if pets:
            BatchStop(self).run(policy, pets, now, cycle_id, stats)  # one by one where it must
        if members:
            ScaleIn(self).run(policy, members, now, cycle_id, stats)

    def refuse(self, policy: Policy, due: Sequence[tuple[Instance, int, float]], action: str,
               verdict: CapVerdict, now: datetime, cycle_id: int | None,
               stats: ActStats) -> None:
        """A batch beyond a cap: act on none of it, journal each skip, raise one alert."""
        rows = Rows()
        with self.db.session() as s:
            rows.alert(dedupe_key=f"cap|{policy.name}|{action}|{now:%Y-%m-%dT%H}", kind="cap",
                       severity="critical", now=now, policy=policy.name,
                       subject=f"{policy.name}: {action} acted on none: {verdict.reason}",
                       body="A policy that would act beyond its limits acts on nothing. "
                            "Check the policy's filters, or raise `limits` (or the `safety` "
                            "settings) if this is intended.",
                       context={"instances": [inst.instance_id for inst, _, _ in due]})
            for inst, episode, usd in due:
                rows.record(key=journal.journal_key(policy.name, inst, action, episode),
                            cycle_id=cycle_id, policy=policy.name, inst=inst, action=action,
                            dry_run=not policy.is_enforced, status="skipped",
                            detail=f"cap: {verdict.reason}", usd_per_hour=usd, now=now)
                stats.skipped[policy.name] += 1
            rows.write(s)

    def _stop(self, policy: Policy, f: Finding, st: State, now: datetime,
              cycle_id: int | None, stats: ActStats) -> None:
        dry = not policy.is_enforced
        key = journal.journal_key(policy.name, f.instance, "stop", st.episode)
        with self.db.session() as s:
            if journal.completed(s, key):
                return
            intent = journal.write_intent(s, key=key, cycle_id=cycle_id, policy=policy.name,
                                          inst=f.instance, action="stop", dry_run=dry,
                                          usd_per_hour=f.usd_per_hour, now=now,
                                          detail=f.reason)
            intent_id = intent.id or 0
        self.fault("after-intent")
        provider = self.providers[f.instance.provider]
        target, why_not = (recheck(provider, f.instance, now) if self.safety.recheck_before_acting
                           else (f.instance, None))
        why_not = why_not or pet_refusal(target, "stop")
        if why_not is not None:
            settled = Settled()
            self.settle_stop(settled, policy, f, st, intent_id, now, stats, why_not=why_not)
            with self.db.session() as s:
                settled.write(s)
            return
        result, error = None, None
        try:
            result = provider.stop(target, dry_run=dry)
        except ProviderError as exc:
            error = str(exc)
        self.fault("after-call")
        settled = Settled()
        self.settle_stop(settled, policy, f, st, intent_id, now, stats, result=result,
                         error=error)
        with self.db.session() as s:
            settled.write(s)

    def settle_stop(self, out: Settled, policy: Policy, f: Finding, st: State,
                    intent_id: int, now: datetime, stats: ActStats, *,
                    why_not: str | None = None, result: ActionResult | None = None,
                    error: str | None = None) -> None:
        """Resolve a stop intent and move the policy state (one instance, batched or not):
        the changes go to `out`, which writes them (`Settled.write`)."""
        if why_not is not None:
            out.resolve(intent_id, "skipped", f"re-check before stop: {why_not}", now)
            out.state(st, state="cleared", since=now, deadline=None)
            stats.skipped[policy.name] += 1
            log.info("stop %s (%s): skipped: %s", label(f.instance), policy.name, why_not)
            return
        status, detail = ((str(result.outcome), result.detail) if result is not None
                          else ("failed", error or "failed"))
        out.resolve(intent_id, status, detail or f.reason, now)
        if status in ("done", "dry-run"):
            out.state(st, state="acted", since=now)
        if status == "done":
            out.set_state(f.instance, InstanceState.STOPPED, now)
            out.rows.alert(**action_alert(
                self.attributor, policy.name, f.instance, st.episode, "stopped", f.reason, now,
                extra=after_stop_note(self.providers, policy, f.instance)))
            stats.stopped[policy.name] += 1
        elif status == "dry-run":
            stats.dry_run[policy.name] += 1
        else:
            stats.skipped[policy.name] += 1
            if result is not None and result.outcome is ActionOutcome.SKIPPED:
                out.state(st, state="cleared", since=now, deadline=None)
        log.info("stop %s (%s): %s %s", label(f.instance), policy.name, status, detail)

    def _action_alert(self, s: Session, policy: str, inst: Instance, episode: int,
                      verb: str, reason: str, now: datetime, extra: str = "") -> None:
        enqueue(s, **action_alert(self.attributor, policy, inst, episode, verb, reason, now,
                                  extra))

    def _clear(self, policy: Policy, f: Finding, st: State, now: datetime,
               stats: ActStats) -> None:
        was_warned = st.state == "warned"
        st.state, st.since, st.deadline = "cleared", now, None
        stats.cleared[policy.name] += 1
        if was_warned and policy.is_enforced and policy.notify_action is not None:
            team = self.attributor.dimensions(f.instance).get("team")
            self.rows.alert(dedupe_key=f"cleared|{policy.name}|{f.instance.provider}|"
                                       f"{f.instance.instance_id}|{st.episode}",
                            kind="cleared", now=now, policy=policy.name,
                            provider=f.instance.provider, instance_id=f.instance.instance_id,
                            team=team, owner=f.instance.tags.get("owner"),
                            recipients=recipients(policy.notify_action.to, f.instance, team),
                            subject=f"{label(f.instance)} is busy again: shutdown cancelled "
                                    f"({policy.name})",
                            body=f"Now: {f.reason or f.evidence}")
