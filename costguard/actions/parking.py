"""`scale_to_zero`: park whole Auto Scaling groups outside office hours, restore them after.

Each cycle of a policy with the step: outside office hours, every group with a member the
policy selects (and whose condition holds) and that is not parked yet is resized to zero;
inside office hours, every group the policy parked is resized back to what it was. The
sizes before parking are written into the journal entry of the park (`sizes={...}` in its
detail), so a restore needs nothing but the journal: a daemon restarted overnight restores
in the morning. A park whose call was interrupted counts as parked until inventory shows the
group still sized (then the call never happened, and it is parked again); its restore only
puts back the sizes the group had. A crash never parks a group twice nor forgets to restore.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlmodel import col, select

from costguard.actions.managed import audience
from costguard.actions.messages import label
from costguard.actions.safety import batch_verdict
from costguard.actions.schedule import in_office_hours
from costguard.alerts.outbox import enqueue
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance
from costguard.policy.evaluate import Finding
from costguard.policy.schema import Policy
from costguard.store.tables import ActionJournalRow

if TYPE_CHECKING:
    from costguard.actions.runner import ActionRunner
    from costguard.actions.stats import ActStats

log = logging.getLogger("costguard.act")

PARKED = ("intent", "done", "interrupted")  # a park in these states may have taken effect
RETRY_REFUSED = timedelta(hours=12)  # a park the provider refused is asked again after this
_SIZES = " | sizes="


def parks(policy: Policy, inst: Instance) -> bool:
    """True when `policy` parks `inst`'s whole group instead of acting on `inst`."""
    return (policy.scale_to_zero_action is not None and inst.owner is not None
            and inst.owner.kind.scalable)


def group_id(inst: Instance) -> str:
    """How the journal names a group (its `instance_id` column)."""
    owner = inst.owner
    assert owner is not None
    return f"group:{owner.kind}:{owner.scope}:{owner.name}"


@dataclass
class _Group:
    member: Instance  # any member seen this cycle: the group's owner, account, region
    usd_per_hour: float


@dataclass
class _Parked:
    row: ActionJournalRow
    sizes: dict[str, Any]


class GroupParking:
    def __init__(self, runner: ActionRunner) -> None:
        self.r = runner

    def run(self, policy: Policy, findings: Sequence[Finding], now: datetime,
            cycle_id: int | None, stats: ActStats) -> None:
        step, hours = policy.scale_to_zero_action, policy.condition.outside_hours
        if step is None or hours is None:
            return
        self.r.rechecks.clear()  # groups resized: what a re-check read is old
        parked, refused = self._parked(policy, now)
        if not in_office_hours(hours, now):
            groups: dict[str, _Group] = {}
            for f in findings:
                if f.holds and parks(policy, f.instance):
                    g = groups.setdefault(group_id(f.instance), _Group(f.instance, 0.0))
                    g.usd_per_hour += f.usd_per_hour
            # an interrupted park whose group inventory still shows sized never happened
            todo = {gid: g for gid, g in groups.items() if gid not in refused and (
                gid not in parked or (
                parked[gid].row.status == "interrupted" and g.member.owner is not None
                and (g.member.owner.desired or 0) > 0))}
            if not todo:
                return
            verdict = batch_verdict([g.usd_per_hour for g in todo.values()], policy.limits,
                                    self.r.budget)
            if not verdict.allowed:
                self.r.refuse(policy, [(g.member, 0, g.usd_per_hour) for g in todo.values()],
                              "scale_to_zero", verdict, now, cycle_id, stats)
                return
            for gid, g in todo.items():
                self._park(policy, gid, g, now, cycle_id, stats)
        elif step.restore_at_office_hours:
            for gid, p in parked.items():
                self._restore(policy, gid, p, now, cycle_id, stats)

    def _parked(self, policy: Policy, now: datetime) -> tuple[dict[str, _Parked], set[str]]:
        """The groups this policy parked and has not restored since, from the journal; and
        those whose park the provider refused in the last 12 hours (an autoscaled MIG, a
        protected group): not asked again every cycle of the same night."""
        with self.r.db.session() as s:
            rows = list(s.exec(select(ActionJournalRow).where(
                ActionJournalRow.policy == policy.name,
                col(ActionJournalRow.action).in_(["park", "restore"]),
                col(ActionJournalRow.dry_run).is_(False)).order_by(
                col(ActionJournalRow.id))))
        last: dict[str, ActionJournalRow] = {}
        refused: set[str] = set()
        for row in rows:
            if row.action == "park" and row.status == "skipped":
                if now - row.intent_at < RETRY_REFUSED:
                    refused.add(row.instance_id)
                continue
            if row.action == "park" and row.status not in PARKED:
                continue  # a park that failed before the call changed nothing
            if row.action == "restore" and row.status != "done":
                continue  # a restore that did not happen leaves the group parked
            last[row.instance_id] = row
        out = {}
        for gid, row in last.items():
            if row.action == "park" and _SIZES in row.detail:
                out[gid] = _Parked(row, json.loads(row.detail.split(_SIZES, 1)[1]))
        return out, refused - set(out)

    def _journal(self, policy: Policy, provider: str, gid: str, action: str, dry: bool,
                 usd: float, now: datetime, cycle_id: int | None, detail: str) -> int:
        with self.r.db.session() as s:
            row = ActionJournalRow(
                key=f"{policy.name}|{provider}|{gid}|{action}|{now:%Y-%m-%dT%H:%M}",
                cycle_id=cycle_id, policy=policy.name, provider=provider, instance_id=gid,
                action=action, dry_run=dry, status="intent", detail=detail,
                usd_per_hour=usd, intent_at=now)
            s.add(row)
            s.flush()
            return row.id or 0

    def _resolve(self, row_id: int, result: ActionResult, now: datetime, keep: str = ""
                 ) -> None:
        with self.r.db.session() as s:
            row = s.get(ActionJournalRow, row_id)
            assert row is not None
            row.status, row.result_at = str(result.outcome), now
            row.detail = f"{result.detail}{keep}"
            s.add(row)

    def _call(self, provider_name: str, owner_inst: Instance, sizes: dict[str, Any],
              hint: str | None, dry: bool) -> ActionResult:
        provider = self.r.providers.get(provider_name)
        resize = getattr(provider, "resize_group", None)
        if resize is None:
            return ActionResult(outcome=ActionOutcome.SKIPPED,
                                detail=f"{provider_name} cannot resize groups")
        try:
            result: ActionResult = resize(owner_inst, min_size=sizes["min"],
                                          desired=sizes["desired"], max_size=sizes["max"],
                                          hint=hint, dry_run=dry)
        except ProviderError as exc:
            result = ActionResult(outcome=ActionOutcome.FAILED, detail=str(exc))
        return result

    def _park(self, policy: Policy, gid: str, g: _Group, now: datetime,
              cycle_id: int | None, stats: ActStats) -> None:
        owner, dry = g.member.owner, not policy.is_enforced
        assert owner is not None
        if owner.desired is None or owner.min_size is None:
            log.info("%s: sizes unknown, not parked", owner)
            return
        before = {"min": owner.min_size, "desired": owner.desired, "max": owner.max_size,
                  "account": g.member.account, "region": g.member.region,
                  "kind": str(owner.kind), "name": owner.name, "scope": owner.scope}
        keep = _SIZES + json.dumps(before, sort_keys=True)
        text = (f"park {owner}: min {owner.min_size}, desired {owner.desired}, max "
                f"{owner.max_size} -> 0, 0, {owner.max_size}")  # a MIG's max: its autoscaler's
        row_id = self._journal(policy, g.member.provider, gid, "park", dry, g.usd_per_hour,
                               now, cycle_id, text + keep)
        self.r.fault("after-intent")
        hint = f"{owner.min_size}/{owner.desired}/{owner.max_size}"
        result = self._call(g.member.provider, g.member,
                            {"min": 0, "desired": 0, "max": owner.max_size}, hint, dry)
        self.r.fault("after-call")
        self._resolve(row_id, result, now, keep)
        if result.outcome is ActionOutcome.DONE:
            stats.parked[policy.name] += 1
            self._tell(policy, g.member, f"{owner} was scaled to zero outside office hours",
                       f"{text}. costguard restores it when office hours begin.", now,
                       g.usd_per_hour)
        elif result.outcome is ActionOutcome.DRY_RUN:
            stats.dry_run[policy.name] += 1
        else:
            stats.skipped[policy.name] += 1
        log.info("park %s (%s): %s %s", owner, policy.name, result.outcome, result.detail)

    def _restore(self, policy: Policy, gid: str, p: _Parked, now: datetime,
                 cycle_id: int | None, stats: ActStats) -> None:
        sizes = p.sizes
        member = Instance.model_validate({
            "provider": p.row.provider, "account": sizes["account"], "region": sizes["region"],
            "instance_id": gid, "instance_type": "", "state": "stopped",
            "launch_time": p.row.intent_at, "observed_at": now,
            "owner": {"kind": sizes["kind"], "name": sizes["name"], "scope": sizes["scope"],
                      "via": "costguard journal"}})
        text = (f"restore {member.owner}: min {sizes['min']}, desired {sizes['desired']}, "
                f"max {sizes['max']} (parked at {p.row.intent_at:%Y-%m-%d %H:%M} UTC)")
        row_id = self._journal(policy, p.row.provider, gid, "restore", False, 0.0, now,
                               cycle_id, text)
        self.r.fault("after-intent")
        result = self._call(p.row.provider, member, sizes, None, False)
        self.r.fault("after-call")
        self._resolve(row_id, result, now)
        if result.outcome is ActionOutcome.DONE:
            stats.restored[policy.name] += 1
            self._tell(policy, member, f"{member.owner} was restored for office hours", text,
                       now, 0.0)
        else:
            stats.skipped[policy.name] += 1  # still parked: tried again next cycle
        log.info("restore %s (%s): %s %s", member.owner, policy.name, result.outcome,
                 result.detail)

    def _tell(self, policy: Policy, member: Instance, subject: str, body: str,
              now: datetime, usd: float) -> None:
        with self.r.db.session() as s:
            enqueue(s, dedupe_key=f"{policy.name}|{group_id(member)}|{subject}|{now:%Y%m%d%H%M}",
                    kind="action", severity="info", now=now, policy=policy.name,
                    provider=member.provider, instance_id=group_id(member),
                    **audience(self.r, policy, member),
                    subject=f"{subject} ({policy.name})", body=body,
                    context={"usd_per_hour": usd, "group": label(member)})
