"""Instances a controller owns (Auto Scaling group, managed instance group, node pool ...).

A member is never stopped or terminated as if it were alone: its group would launch a
replacement, or its cluster would lose work it scheduled there. The act stage routes each
finding of an acting policy:
- a pet: the policy's `stop` (and what follows it), as ever;
- a member of an Auto Scaling group or managed instance group, with a `scale_in` step: warn,
  grace, re-check, then shrink the group by that member (`ScaleIn`), never below its minimum;
- any other member (a Kubernetes node, an EMR/Batch/Ray worker, a group without `scale_in`):
  journaled as skipped with its owner named, and told to the policy's recipients once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from costguard.actions import controllers, journal
from costguard.actions.bulk import Settled, State
from costguard.actions.messages import action_alert, label, recipients
from costguard.actions.safety import owner_advice, pet_refusal, recheck
from costguard.errors import ProviderError
from costguard.model import (
    AT_MINIMUM,
    ActionOutcome,
    ActionResult,
    Instance,
    InstanceState,
    Owner,
    OwnerKind,
)
from costguard.policy.actions import StopAction
from costguard.policy.evaluate import Finding
from costguard.policy.schema import Policy

if TYPE_CHECKING:
    from costguard.actions.runner import ActionRunner
    from costguard.actions.stats import ActStats

log = logging.getLogger("costguard.act")


def refused_as_pet(policy: Policy, inst: Instance) -> bool:
    """True when `policy` would act on `inst` but may not: it is a controller's member and
    the policy has no way to act through that controller."""
    owner = inst.owner
    if owner is None:
        return False
    if (policy.stop_action is None and policy.terminate_action is None
            and policy.scale_in_action is None and policy.scale_to_zero_action is None):
        return False  # notify and tag only: fine on any instance
    if policy.scale_to_zero_action is not None and owner.kind.scalable:
        return False  # the whole group is parked (actions/parking.py)
    return not (owner.kind.scalable and policy.scale_in_action is not None)


def acting_step(policy: Policy, inst: Instance) -> StopAction | None:
    """The step that acts on `inst` at the deadline: `stop` for a pet, `scale_in` for a
    member of a scalable group; None: the policy only tells people about it."""
    if inst.owner is None:
        return policy.stop_action
    return policy.scale_in_action if inst.owner.kind.scalable else None


def with_group_tags(inst: Instance) -> Instance:
    """`inst` with its group's tags where its own lack them (who to tell, attribution)."""
    if inst.owner is None or not inst.owner.tags:
        return inst
    return inst.model_copy(update={"tags": {**inst.owner.tags, **inst.tags}})


def audience(r: ActionRunner, policy: Policy, inst: Instance) -> dict[str, Any]:
    """Who hears about a member (the `team`, `owner` and `recipients` of its alerts): the
    policy's notify recipients (else owner and team), resolved with the group's tags where
    the member's own lack them."""
    inst = with_group_tags(inst)
    team = r.attributor.dimensions(inst).get("team")
    to = policy.notify_action.to if policy.notify_action else ("owner", "team")
    return {"team": team, "owner": inst.tags.get("owner"),
            "recipients": recipients(to, inst, team)}


def managed_notice(f: Finding, owner: Owner) -> tuple[str, str]:
    """The one message a policy's recipients get when it may not act on a member."""
    inst = f.instance
    if owner.kind.kubernetes:
        subject = (f"{label(inst)}: idle node in {owner} costs ${f.usd_per_hour:,.2f}/h; "
                   f"reported, not stopped ({f.policy.name})")
    elif owner.kind is OwnerKind.TPU_SLICE:  # the slice is the instance: one unit
        subject = (f"{label(inst)}, a {owner.via}, costs ${f.usd_per_hour:,.2f}/h; reported, "
                   f"not stopped ({f.policy.name})")
    else:
        subject = f"{label(inst)} belongs to {owner}: not stopped ({f.policy.name})"
    body = "\n".join([
        f"Why: {f.reason}",
        f"Cost: ${f.usd_per_hour:,.2f}/h ({inst.instance_type}, {inst.lifecycle}, "
        f"{inst.region})",
        f"Owner: {owner} (from {owner.via})" + (
            f"; desired {owner.desired}, min {owner.min_size}, max {owner.max_size}"
            if owner.desired is not None else ""),
        (f"costguard never stops part of a TPU slice, and the Cloud TPU API stops no "
         f"multi-host node. What to do: {owner_advice(owner)}."
         if owner.kind is OwnerKind.TPU_SLICE else
         f"costguard does not stop a member of a {owner.kind}: the controller would replace "
         f"it or lose its work. What to do: {owner_advice(owner)}."),
    ])
    return subject, body


def report_member(r: ActionRunner, policy: Policy, f: Finding, st: State, now: datetime,
                  stats: ActStats, cycle_id: int | None) -> None:
    """A policy that would stop or terminate a controller's member: refused, journaled
    with the owner named, and told to the policy's recipients once an episode."""
    if st.state == "managed":
        return
    inst, owner = f.instance, f.instance.owner
    assert owner is not None
    st.state, st.since, st.deadline = "managed", now, None
    verb = "stop" if policy.stop_action is not None else "terminate"
    why = pet_refusal(inst, verb) or ""
    key = journal.journal_key(policy.name, inst, "managed", st.episode)
    r.rows.record(key=key, cycle_id=cycle_id, policy=policy.name, inst=inst,
                  action="skip", dry_run=not policy.is_enforced, status="skipped",
                  detail=why, usd_per_hour=f.usd_per_hour, now=now)
    stats.skipped[policy.name] += 1
    if not policy.is_enforced:
        return
    subject, body = managed_notice(f, owner)
    r.rows.alert(dedupe_key=f"managed|{key}", kind="finding", severity="info",
                 subject=subject, body=body, now=now, policy=policy.name,
                 provider=inst.provider, instance_id=inst.instance_id,
                 **audience(r, policy, inst),
                 context={"reason": f.reason, "evidence": f.evidence,
                          "usd_per_hour": f.usd_per_hour, "owner": str(owner),
                          "owner_kind": str(owner.kind), "instance_type": inst.instance_type})


class ScaleIn:
    """Due members of scalable groups: journal the intent, re-check the member, then ask
    the provider to shrink its group by it (`scale_in`), one member at a time so each call
    reads the group's sizes as they are then."""

    def __init__(self, runner: ActionRunner) -> None:
        self.r = runner

    def run(self, policy: Policy, due: Sequence[tuple[Finding, State]], now: datetime,
            cycle_id: int | None, stats: ActStats) -> None:
        self.r.rechecks.clear()  # members leave their groups: what a re-check read is old
        removed = [(f.instance, policy.name) for f, st in due
                   if self._one(policy, f, st, now, cycle_id, stats)]
        if removed:  # the next cycle checks that no group replaced them
            with self.r.db.session() as s:
                controllers.expect(s, removed, now)

    def _one(self, policy: Policy, f: Finding, st: State, now: datetime,
             cycle_id: int | None, stats: ActStats) -> bool:
        """Scale in by one member; True when the group really shrank."""
        dry = not policy.is_enforced
        inst = f.instance
        key = journal.journal_key(policy.name, inst, "scale_in", st.episode)
        with self.r.db.session() as s:
            if journal.completed(s, key):
                return False
            intent_id = journal.write_intent(
                s, key=key, cycle_id=cycle_id, policy=policy.name, inst=inst,
                action="scale_in", dry_run=dry, usd_per_hour=f.usd_per_hour, now=now,
                detail=f.reason).id or 0
        self.r.fault("after-intent")
        provider = self.r.providers[inst.provider]
        target, why_not = (recheck(provider, inst, now, pet=False)
                           if self.r.safety.recheck_before_acting else (inst, None))
        if target.owner is None or target.owner.name != (inst.owner.name if inst.owner else ""):
            target = inst  # keep the group as inventory saw it (sizes, tags)
        result: ActionResult | None = None
        if why_not is None:
            scale_in = getattr(provider, "scale_in", None)
            if scale_in is None:
                result = ActionResult(outcome=ActionOutcome.SKIPPED,
                                      detail=f"{inst.provider} cannot scale groups in")
            else:
                try:
                    result = scale_in(target, dry_run=dry)
                except ProviderError as exc:
                    result = ActionResult(outcome=ActionOutcome.FAILED, detail=str(exc))
        self.r.fault("after-call")
        out = Settled()
        self._settle(out, policy, f, st, intent_id, now, stats, why_not, result)
        with self.r.db.session() as s:
            out.write(s)
        return result is not None and why_not is None and \
            result.outcome is ActionOutcome.DONE

    def _settle(self, out: Settled, policy: Policy, f: Finding, st: State, intent_id: int,
                now: datetime, stats: ActStats, why_not: str | None,
                result: ActionResult | None) -> None:
        inst, owner = f.instance, f.instance.owner
        assert owner is not None
        if why_not is not None or result is None:
            why = why_not or "no result"
            out.resolve(intent_id, "skipped", f"re-check before scale-in: {why}", now)
            out.state(st, state="cleared", since=now, deadline=None)
            stats.skipped[policy.name] += 1
            log.info("scale-in %s (%s): skipped: %s", label(inst), policy.name, why)
            return
        status = str(result.outcome)
        out.resolve(intent_id, status, result.detail, now)
        if result.outcome is ActionOutcome.DONE:
            out.state(st, state="acted", since=now)
            out.set_state(inst, InstanceState.TERMINATED, now)
            out.rows.alert(**action_alert(
                self.r.attributor, policy.name, inst, st.episode,
                f"removed from {owner} (scale-in)", f.reason, now, extra=result.detail))
            stats.scaled_in[policy.name] += 1
        elif result.outcome is ActionOutcome.DRY_RUN:
            out.state(st, state="acted", since=now)
            stats.dry_run[policy.name] += 1
        elif result.outcome is ActionOutcome.SKIPPED:
            out.state(st, state="acted", since=now)  # not again this episode
            stats.skipped[policy.name] += 1
            if AT_MINIMUM in result.detail and policy.is_enforced:
                self._at_minimum(out, policy, f, owner, st, now, result.detail)
        else:
            stats.skipped[policy.name] += 1  # failed: stays warned, retried next cycle
        log.info("scale-in %s (%s): %s %s", label(inst), policy.name, status, result.detail)

    def _at_minimum(self, out: Settled, policy: Policy, f: Finding, owner: Owner,
                    st: State, now: datetime, detail: str) -> None:
        inst = f.instance
        out.rows.alert(
            dedupe_key=f"at-minimum|{policy.name}|{owner.kind}|{owner.name}|"
                       f"{inst.instance_id}|{st.episode}",
            kind="finding", severity="warning", now=now, policy=policy.name,
            provider=inst.provider, instance_id=inst.instance_id,
            **audience(self.r, policy, inst),
            subject=f"{label(inst)} is idle but {owner} is {AT_MINIMUM}: lower its minimum "
                    f"to let it shrink ({policy.name})",
            body=f"Why: {f.reason}\nCost: ${f.usd_per_hour:,.2f}/h\n{detail}\n"
                 f"costguard never takes a group below its minimum. Lower the group's "
                 f"minimum size (MinSize, or the autoscaler's minimum) if this capacity is "
                 f"not needed.",
            context={"reason": f.reason, "evidence": f.evidence, "owner": str(owner),
                     "usd_per_hour": f.usd_per_hour})
