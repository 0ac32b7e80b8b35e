"""Acting on volumes, snapshots and addresses: per (policy, resource) seen -> warned ->
(snapshotting ->) acted | cleared, each step journaled.

A finding starts an episode: the owner is told (an enforced policy's notice is sent, a dry
run's only journaled) and the tag step runs. With a `delete` step the resource is due when
its grace ends; then, per policy and cycle, all or nothing within `limits` (count and
`max_usd_per_month`), each due resource is read again and deleted only if it is still
unused, attached to nothing, not protected, not snoozed and the same resource. A volume is
snapshotted first: the snapshot is started (journaled), waited for across cycles (the
state `snapshotting`), and the delete happens only once it has completed. Every provider
call is journaled as an intent before it and resolved after; an intent a crash left open is
settled from what the cloud shows before anything else (`reconcile`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlmodel import Session, select

from costguard.actions import journal
from costguard.actions.messages import recipients
from costguard.actions.safety import Budget, CycleBudget, protects, snooze_tag_until
from costguard.alerts.outbox import enqueue
from costguard.costs.attribution import Attributor
from costguard.errors import ProviderError
from costguard.model import ActionOutcome
from costguard.policy.schema import Policy
from costguard.standing.evaluate import StandingFinding
from costguard.standing.model import HoldsStanding, Standing, StandingKind, from_row
from costguard.store.db import Database
from costguard.store.tables import PolicyStateRow, StandingRow

log = logging.getLogger("costguard.standing")

OPEN = ("warned", "snapshotting")  # states of an episode still under way
# states of an episode that ended: "acted" (deleted, or a dry run's record), "failed" (its
# snapshot failed: not deleted, the owner told); a new episode needs the finding to clear
ENDED = ("acted", "failed")


@dataclass
class StandingStats:
    warned: Counter[str] = field(default_factory=Counter)
    deleted: Counter[str] = field(default_factory=Counter)
    dry_run: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    capped: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    snapshotting: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {k: dict(v) for k, v in vars(self).items() if v}


def label(item: Standing) -> str:
    return f"{item.kind} {item.name} ({item.resource_id})" if item.name and \
        item.name != item.resource_id else f"{item.kind} {item.resource_id}"


def skip_reason(seen: Standing, fresh: Standing | None, now: datetime) -> str | None:
    """Why a due resource must not be deleted now, as the cloud shows it (None: go)."""
    if fresh is None:
        return "gone meanwhile"
    if fresh.in_use or fresh.used_by:
        return f"in use again ({', '.join(fresh.used_by) or fresh.state})"
    if protects(fresh.tags):
        return "costguard:protect was set since the last listing"
    until = snooze_tag_until(fresh.tags)
    if until is not None and until > now:
        return f"snoozed until {until.isoformat()}"
    if seen.created_at is not None and fresh.created_at is not None \
            and fresh.created_at != seen.created_at:
        return "recreated under its id since the last listing"
    if fresh.unused_since is not None and seen.unused_since is not None \
            and fresh.unused_since > seen.unused_since:  # a disk's lastDetachTimestamp
        return (f"used since the last listing (detached again at "
                f"{fresh.unused_since:%Y-%m-%d %H:%M} UTC)")
    return None


class StandingRunner:
    def __init__(self, db: Database, providers: Mapping[str, object],
                 attributor: Attributor) -> None:
        self.db = db
        self.providers = providers
        self.attributor = attributor

    def _provider(self, name: str) -> HoldsStanding:
        provider = self.providers[name]
        assert isinstance(provider, HoldsStanding)
        return provider

    # -- recovery ----------------------------------------------------------------------
    def reconcile(self, now: datetime) -> int:
        """Settle intents a crash left open: a delete is done when the resource is gone."""
        settled = 0
        with self.db.session() as s:
            for row in journal.unresolved(s, standing=True):
                stored = s.get(StandingRow, (row.provider, row.instance_id))
                gone = stored is None or stored.gone
                if not gone and stored is not None and row.action == "delete":
                    try:
                        gone = self._provider(row.provider).describe_standing(
                            from_row(stored)) is None
                    except ProviderError:
                        gone = False
                done = row.action == "delete" and gone
                journal.resolve(s, row.id or 0, "done" if done else "interrupted",
                                f"resolved after restart: {'gone' if gone else 'still there'}",
                                now)
                if done and stored is not None:  # the alert the crash kept from going out
                    snapshot = row.detail.removeprefix("after snapshot ") \
                        if row.detail.startswith("after snapshot ") else ""
                    self._deleted(s, row.policy, from_row(stored), journal.episode_of(row.key),
                                  "unused; the delete was confirmed after a restart",
                                  snapshot, now)
                settled += 1
        return settled

    def _deleted(self, s: Session, policy: str, item: Standing, episode: int, reason: str,
                 snapshot: str, now: datetime) -> None:
        """What follows a delete the cloud confirmed (at once, or after a restart): the
        resource is gone, the episode acted, and its owner and team are told (once)."""
        stored = s.get(StandingRow, (item.provider, item.resource_id))
        if stored is not None:
            stored.gone, stored.last_seen = True, now
            s.add(stored)
        st = s.get(PolicyStateRow, (policy, item.provider, item.resource_id))
        if st is not None:
            st.state, st.since, st.deadline = "acted", now, None
            s.add(st)
        team = self.attributor.dimensions(item).get("team")
        verb = "released" if item.kind is StandingKind.ADDRESS else "deleted"
        usd = item.usd_per_month or 0.0
        enqueue(s, dedupe_key=f"action|{policy}|{item.provider}|{item.resource_id}|{episode}",
                kind="deleted", severity="warning", now=now, policy=policy,
                provider=item.provider, instance_id=item.resource_id, team=team,
                owner=item.tags.get("owner"),
                recipients=recipients(("owner", "team"), item, team),
                subject=f"{label(item)} was {verb} by costguard ({policy})",
                body=f"Why: {reason}\nSaves ${usd:,.2f}/month"
                     + (f"\nIts data is kept in snapshot {snapshot}." if snapshot else ""),
                context={"reason": reason, "snapshot": snapshot or None, "usd_per_month": usd})

    # -- the cycle ----------------------------------------------------------------------
    def run(self, policies: Sequence[Policy], findings: Sequence[StandingFinding],
            now: datetime, cycle_id: int | None, budget: Budget | None = None
            ) -> StandingStats:
        """One cycle's warnings and deletes. `budget`: what is left of the fleet-wide
        per-cycle caps (the act stage's; unlimited when not given)."""
        stats = StandingStats()
        budget = budget or CycleBudget(None, None)
        self.reconcile(now)
        by_policy: dict[str, list[StandingFinding]] = {}
        for f in findings:
            by_policy.setdefault(f.policy.name, []).append(f)
        for policy in policies:
            self._run_policy(policy, by_policy.get(policy.name, []), now, cycle_id, stats,
                             budget)
        return stats

    def _run_policy(self, policy: Policy, findings: list[StandingFinding], now: datetime,
                    cycle_id: int | None, stats: StandingStats, budget: Budget) -> None:
        due: list[tuple[StandingFinding, PolicyStateRow]] = []
        with self.db.session() as s:
            states = {st.instance_id: st for st in s.exec(select(PolicyStateRow).where(
                PolicyStateRow.policy == policy.name))}
            for f in findings:
                st = states.get(f.item.resource_id)
                snoozed = snooze_tag_until(f.item.tags)
                # a protected one is never warned of; nor, by a policy that deletes, one
                # something holds (attached to a stopped instance, a Kubernetes volume)
                held = policy.delete_action is not None and bool(f.item.used_by)
                if not f.holds or held or protects(f.item.tags):
                    if st is not None and st.state in (*OPEN, *ENDED):
                        st.state, st.since, st.deadline = "cleared", now, None
                        s.add(st)
                    continue
                if (snoozed is not None and snoozed > now) or (
                        st is not None and st.snooze_until is not None
                        and st.snooze_until > now):
                    continue  # its deadline waits; the re-check refuses a delete meanwhile
                if st is None or st.state not in (*OPEN, *ENDED):
                    st = self._start_episode(s, policy, f, st, now, cycle_id, stats)
                elif st.state in OPEN and st.deadline is not None and now >= st.deadline:
                    due.append((f, st))
        if due and policy.delete_action is not None:
            self._delete_due(policy, due, now, cycle_id, stats, budget)

    def _start_episode(self, s: Session, policy: Policy, f: StandingFinding,
                       st: PolicyStateRow | None, now: datetime, cycle_id: int | None,
                       stats: StandingStats) -> PolicyStateRow:
        item = f.item
        dry = not policy.is_enforced
        delete = policy.delete_action
        deadline = now + delete.grace if delete is not None else None
        if st is None:
            st = PolicyStateRow(policy=policy.name, provider=item.provider,
                                instance_id=item.resource_id, state="seen", since=now,
                                episode=0)
        st.episode += 1
        st.state, st.since, st.deadline, st.evidence = ("warned" if delete else "acted"), now, \
            deadline, f.reason
        s.add(st)
        team = self.attributor.dimensions(item).get("team")
        notify = policy.notify_action
        if notify is not None:
            will = "will" if policy.is_enforced else "would"
            verb = "released" if item.kind is StandingKind.ADDRESS else (
                "snapshotted and deleted" if item.kind is StandingKind.VOLUME
                and delete is not None and delete.snapshot else "deleted")
            subject = (f"{label(item)} {will} be {verb} at {deadline:%Y-%m-%d %H:%M} UTC "
                       f"unless it is used or protected ({policy.name}"
                       f"{'' if policy.is_enforced else ', dry-run'})" if deadline else
                       f"{policy.name}: {label(item)}: {f.reason}")
            body = "\n".join(filter(None, [
                f"Why: {f.reason}",
                f"Cost: ${f.usd_per_month:,.2f}/month ({item.detail or item.kind}, "
                f"{item.region}; {item.price_source or 'unpriced'})",
                f"Deadline: {deadline.isoformat()}" if deadline else "",
                "keep it: tag it costguard:protect, or costguard:snooze-until=<ISO time>"
                if deadline else "",
                notify.message]))
            key = journal.journal_key(policy.name, item, "notify", st.episode)
            if not dry:
                enqueue(s, dedupe_key=key, kind="delete-warning" if deadline else "finding",
                        severity="warning" if deadline else "info", subject=subject,
                        body=body, now=now, recipients=recipients(notify.to, item, team),
                        policy=policy.name, provider=item.provider,
                        instance_id=item.resource_id, team=team, owner=item.tags.get("owner"),
                        context={"reason": f.reason, "usd_per_month": f.usd_per_month,
                                 "kind": str(item.kind),
                                 "deadline": deadline.isoformat() if deadline else None})
            journal.record(s, key=key, cycle_id=cycle_id, policy=policy.name, inst=item,
                           action="notify", dry_run=dry, status="dry-run" if dry else "done",
                           detail=subject, usd_per_hour=item.usd_per_hour, now=now)
        tag = policy.tag_action
        values = {k: v.format(policy=policy.name, now=now.isoformat(timespec="seconds"),
                              deadline=deadline.isoformat(timespec="seconds")
                              if deadline else "") for k, v in tag.set_.items()
                  if tag.overwrite or k not in item.tags} if tag is not None else {}
        if values:
            try:
                result = self._provider(item.provider).tag_standing(item, values, dry_run=dry)
                status, detail = str(result.outcome), result.detail
            except ProviderError as exc:
                status, detail = "failed", str(exc)
            journal.record(s, key=journal.journal_key(policy.name, item, "tag", st.episode),
                           cycle_id=cycle_id, policy=policy.name, inst=item, action="tag",
                           dry_run=dry, status=status, detail=detail,
                           usd_per_hour=item.usd_per_hour, now=now)
        stats.warned[policy.name] += 1
        return st

    def _capped(self, policy: Policy, due: list[tuple[StandingFinding, PolicyStateRow]],
                budget: Budget) -> str | None:
        """Why the batch is refused whole (None: allowed): the policy's own caps (count,
        dollars a month), then what is left of the fleet-wide per-cycle caps, which the
        instances' stops took from first (actions/safety.py CycleBudget)."""
        count = len(due)
        usd = sum(f.usd_per_month for f, _ in due)
        limits = policy.limits
        if count > limits.max_actions_per_cycle:
            return f"{count} resources due, cap is {limits.max_actions_per_cycle} per cycle"
        if limits.max_usd_per_month is not None and usd > limits.max_usd_per_month:
            return (f"${usd:,.2f}/month due, cap is ${limits.max_usd_per_month:,.2f}/month "
                    "per cycle")
        fleet = budget.take([f.item.usd_per_hour for f, _ in due], noun="resources")
        return None if fleet.allowed else fleet.reason

    def _delete_due(self, policy: Policy, due: list[tuple[StandingFinding, PolicyStateRow]],
                    now: datetime, cycle_id: int | None, stats: StandingStats,
                    budget: Budget) -> None:
        capped = self._capped(policy, due, budget)
        if capped is not None:
            stats.capped[policy.name] += len(due)
            with self.db.session() as s:
                enqueue(s, dedupe_key=f"cap|{policy.name}|{now:%Y-%m-%d}", kind="cap",
                        severity="critical", now=now, policy=policy.name,
                        subject=f"{policy.name}: nothing deleted this cycle ({capped})",
                        body="More due at once than the limits allow usually means "
                             "a broken filter; check it, or raise its limits.",
                        context={"reason": capped})
            return
        for f, st in due:
            self._delete_one(policy, f, st, now, cycle_id, stats)

    def _delete_one(self, policy: Policy, f: StandingFinding, st: PolicyStateRow,
                    now: datetime, cycle_id: int | None, stats: StandingStats) -> None:
        delete = policy.delete_action
        assert delete is not None
        item, dry = f.item, not policy.is_enforced
        provider = self._provider(item.provider)
        key = journal.journal_key(policy.name, item, "delete", st.episode)
        with self.db.session() as s:
            if journal.completed(s, key):
                return
        try:
            fresh = provider.describe_standing(item)
        except ProviderError as exc:
            stats.failed[policy.name] += 1
            log.warning("%s not read again: %s", item.resource_id, exc)
            return
        why = skip_reason(item, fresh, now)
        if why is not None:
            with self.db.session() as s:
                journal.record(s, key=key, cycle_id=cycle_id, policy=policy.name, inst=item,
                               action="delete", dry_run=dry, status="skipped", detail=why,
                               usd_per_hour=item.usd_per_hour, now=now)
                row = s.get(PolicyStateRow, (st.policy, st.provider, st.instance_id))
                if row is not None:
                    row.state, row.since, row.deadline = "cleared", now, None
                    s.add(row)
            stats.skipped[policy.name] += 1
            return
        assert fresh is not None
        snapshot = ""
        if item.kind is StandingKind.VOLUME and delete.snapshot:
            snapshot, ready = self._snapshot(policy, fresh, st, now, cycle_id, dry, stats)
            if not ready:
                return
        with self.db.session() as s:
            intent = journal.write_intent(
                s, key=key, cycle_id=cycle_id, policy=policy.name, inst=item, action="delete",
                dry_run=dry, usd_per_hour=item.usd_per_hour, now=now,
                detail=f"after snapshot {snapshot}" if snapshot else "")
            intent_id = intent.id or 0
        try:
            result = provider.delete_standing(fresh, dry_run=dry)
            status, detail = str(result.outcome), result.detail
        except ProviderError as exc:
            status, detail = "failed", str(exc)
        kept = f"; snapshot {snapshot} kept" if snapshot else ""
        with self.db.session() as s:
            journal.resolve(s, intent_id, status, detail + kept, now)
            row = s.get(PolicyStateRow, (st.policy, st.provider, st.instance_id))
            if row is not None and status in ("done", "dry-run", "skipped"):
                row.state, row.since, row.deadline = "acted", now, None
                s.add(row)
            if status == "done":
                self._deleted(s, policy.name, item, st.episode, f.reason, snapshot, now)
        counter = {"done": stats.deleted, "dry-run": stats.dry_run,
                   "skipped": stats.skipped}.get(status, stats.failed)
        counter[policy.name] += 1

    def _snapshot(self, policy: Policy, fresh: Standing, st: PolicyStateRow, now: datetime,
                  cycle_id: int | None, dry: bool, stats: StandingStats) -> tuple[str, bool]:
        """The volume's snapshot: (its id, whether it has completed). Journaled when first
        started; found again by its tag on later cycles."""
        provider = self._provider(fresh.provider)
        key = journal.journal_key(policy.name, fresh, "snapshot", st.episode)
        if dry:
            try:
                provider.snapshot_volume(fresh, dry_run=True)
            except ProviderError as exc:
                log.info("snapshot of %s would fail: %s", fresh.resource_id, exc)
            return "", True
        first = st.state != "snapshotting"
        intent_id = 0
        if first:
            with self.db.session() as s:
                intent_id = journal.write_intent(
                    s, key=key, cycle_id=cycle_id, policy=policy.name, inst=fresh,
                    action="snapshot", dry_run=False, usd_per_hour=fresh.usd_per_hour,
                    now=now).id or 0
        try:
            snap_id, state = provider.snapshot_volume(fresh, dry_run=False)
            outcome = (ActionOutcome.FAILED if state == "error" else ActionOutcome.DONE)
            detail = f"snapshot {snap_id} {state}"
        except ProviderError as exc:
            snap_id, state, outcome, detail = "", "error", ActionOutcome.FAILED, str(exc)
        with self.db.session() as s:
            if first:
                journal.resolve(s, intent_id, str(outcome), detail, now)
            elif state in ("completed", "error"):
                journal.record(s, key=f"{key}|{state}", cycle_id=cycle_id, policy=policy.name,
                               inst=fresh, action="snapshot", dry_run=False,
                               status=str(outcome), detail=detail,
                               usd_per_hour=fresh.usd_per_hour, now=now)
            row = s.get(PolicyStateRow, (st.policy, st.provider, st.instance_id))
            if row is not None:
                row.state, row.evidence = ("failed" if state == "error" else "snapshotting"), \
                    detail
                s.add(row)
            if state == "error":  # not deleted; the owner hears once, the episode ends
                team = self.attributor.dimensions(fresh).get("team")
                enqueue(s, dedupe_key=f"snapshot-failed|{policy.name}|{fresh.provider}|"
                                      f"{fresh.resource_id}|{st.episode}",
                        kind="action-failed", severity="warning", now=now,
                        policy=policy.name, provider=fresh.provider,
                        instance_id=fresh.resource_id, team=team,
                        owner=fresh.tags.get("owner"),
                        recipients=recipients(("owner", "team"), fresh, team),
                        subject=f"{label(fresh)} was not deleted: its snapshot failed "
                                f"({policy.name})",
                        body=f"{detail}\nNothing was deleted. costguard tries again only "
                             "after the volume is used, or protected, and found unused anew.",
                        context={"reason": detail})
        if state == "completed":
            return snap_id, True
        (stats.failed if state == "error" else stats.snapshotting)[policy.name] += 1
        return snap_id, False
