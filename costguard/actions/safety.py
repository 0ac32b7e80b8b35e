"""Safety rules that hold whatever a policy says: protection, snoozes, blast-radius caps."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from costguard.clock import utc
from costguard.errors import ProviderError
from costguard.model import Instance, InstanceState, Owner, OwnerKind

if TYPE_CHECKING:
    from costguard.policy.schema import Limits

PROTECT_TAG = "costguard:protect"
SNOOZE_TAG = "costguard:snooze-until"
_FALSE = {"false", "0", "no", "off"}
_LABEL_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})t(\d{2})-(\d{2})(?:-(\d{2}))?z")


def protects(tags: Mapping[str, str]) -> bool:
    """True when `tags` carry `costguard:protect` with any value but false/0/no/off."""
    value = tags.get(PROTECT_TAG)
    return value is not None and value.strip().lower() not in _FALSE


def is_protected(inst: Instance) -> bool:
    """`costguard:protect` (any value but false/0/no/off) puts an instance out of reach; on
    the group that owns it (ASG tag, MIG label), it puts every member out of reach."""
    return protects(inst.tags) or (inst.owner is not None and protects(inst.owner.tags))


def snoozed_until(inst: Instance) -> datetime | None:
    """The expiry in the snooze tag (the instance's, or its group's: the later of the two),
    if it holds a valid ISO-8601 time."""
    own = snooze_tag_until(inst.tags)
    group = snooze_tag_until(inst.owner.tags) if inst.owner is not None else None
    return max(filter(None, [own, group]), default=None)


def owner_advice(owner: Owner) -> str:
    """What to do instead of stopping a member of `owner`."""
    if owner.kind.kubernetes:
        return ("draining a node belongs to the cluster's autoscaler: cordon and drain it, "
                "or let the autoscaler shrink the node pool")
    if owner.kind is OwnerKind.TPU_SLICE:
        return ("the Cloud TPU API stops single-host TPU nodes only: delete the slice when "
                "its work is saved, or recreate it smaller")
    if owner.kind is OwnerKind.TPU_QUEUED_RESOURCE:
        return ("delete the queued resource (with its TPU nodes) when the work is saved: its "
                "nodes are the queued resource's, not costguard's to stop")
    if owner.kind.scalable:
        return ("add a `scale_in` step to the policy to shrink the group by it, or lower the "
                "group's desired size")
    return f"shrink or stop it through its {owner.kind}, which would otherwise replace it"


def pet_refusal(inst: Instance, action: str) -> str | None:
    """Why `action` (stop, start, terminate) must not touch `inst` as if it were alone: its
    controller would replace it, or lose the work it scheduled there. None for a pet."""
    owner = inst.owner
    if owner is None:
        return None
    return f"{action} refused: managed by {owner} ({owner.via}); {owner_advice(owner)}"


def snooze_tag_until(tags: Mapping[str, str]) -> datetime | None:
    """The expiry a resource's own snooze tag holds, if it holds a valid ISO-8601 time."""
    return _snooze_tag(tags.get(SNOOZE_TAG))


def _snooze_tag(raw: str | None) -> datetime | None:
    if not raw:
        return None
    text = raw.strip()
    # GCE label values allow no ':' or '+': `2026-11-23t14-00z` stands for 2026-11-23T14:00Z
    label = _LABEL_TIME.fullmatch(text.lower())
    if label:
        d, hh, mm, ss = label.groups()
        text = f"{d}T{hh}:{mm}:{ss or '00'}+00:00"
    try:
        return utc(datetime.fromisoformat(text))  # 3.11 reads a trailing Z itself
    except ValueError:
        return None


@dataclass(frozen=True)
class CapVerdict:
    allowed: bool
    reason: str = ""


def check_caps(
    usd_per_hour: Sequence[float], *, max_actions: int | None, max_usd_per_hour: float | None
) -> CapVerdict:
    """All or nothing: a policy due to act beyond its cap acts on none (and alerts)."""
    count, dollars = len(usd_per_hour), sum(usd_per_hour)
    if max_actions is not None and count > max_actions:
        return CapVerdict(False, f"{count} instances due, cap is {max_actions} per cycle")
    if max_usd_per_hour is not None and dollars > max_usd_per_hour:
        return CapVerdict(
            False, f"${dollars:,.2f}/h affected, cap is ${max_usd_per_hour:,.2f}/h per cycle")
    return CapVerdict(True)


class Budget(Protocol):
    """What is left of the per-cycle caps, taken a policy's batch at a time."""

    def take(self, usd_per_hour: Sequence[float], *, noun: str = "instances"
             ) -> CapVerdict: ...


@dataclass
class CycleBudget:
    """What is left of the fleet-wide per-cycle caps (SafetySettings) as policies act."""

    actions_left: int | None
    usd_per_hour_left: float | None

    def take(self, usd_per_hour: Sequence[float], *, noun: str = "instances") -> CapVerdict:
        """Reserve a whole batch, or nothing: the same all-or-nothing rule as per policy.
        `noun`: what the batch is (volumes, snapshots and addresses take from it too)."""
        count, dollars = len(usd_per_hour), sum(usd_per_hour)
        if self.actions_left is not None and count > self.actions_left:
            return CapVerdict(False, f"{count} {noun} due, {self.actions_left} left of the "
                                     "fleet-wide per-cycle cap (safety.max_actions_per_cycle)")
        if self.usd_per_hour_left is not None and dollars > self.usd_per_hour_left + 1e-9:
            return CapVerdict(False, f"${dollars:,.2f}/h due, ${self.usd_per_hour_left:,.2f}/h "
                                     "left of the fleet-wide per-cycle cap "
                                     "(safety.max_usd_per_hour_per_cycle)")
        if self.actions_left is not None:
            self.actions_left -= count
        if self.usd_per_hour_left is not None:
            self.usd_per_hour_left -= dollars
        return CapVerdict(True)


def batch_verdict(usd_per_hour: Sequence[float], limits: Limits,
                  budget: Budget) -> CapVerdict:
    """The one rule for a policy's due batch in a cycle (live runner and backtest alike):
    within the policy's own `limits`, then taken whole from what is left of the fleet-wide
    budget; refused whole by either (and then takes nothing from the budget)."""
    verdict = check_caps(usd_per_hour, max_actions=limits.max_actions_per_cycle,
                         max_usd_per_hour=limits.max_usd_per_hour)
    return budget.take(usd_per_hour) if verdict.allowed else verdict


def snooze_limit(requested: datetime, started: datetime, max_snooze: timedelta | None
                 ) -> datetime:
    """The snooze expiry an admin allows: at most `max_snooze` after the snooze began."""
    if max_snooze is None:
        return requested
    return min(requested, started + max_snooze)


# a launch time read back from the store may differ from the cloud's by sub-second rounding
SAME_LAUNCH = timedelta(seconds=1)


def recheck(provider: object, inst: Instance, now: datetime,
            want: InstanceState = InstanceState.RUNNING, *, pet: bool = True
            ) -> tuple[Instance, str | None]:
    """Ask the provider for the instance as it is now, right before acting on it.

    Returns the fresh instance and, when the action must not go ahead, why. Providers
    without the optional `describe` capability are trusted to check the state themselves
    inside `stop` (every provider's stop refuses an instance that is not running).
    """
    describe = getattr(provider, "describe", None)
    if describe is None:
        return inst, None
    try:
        fresh = describe(inst)
    except ProviderError as exc:
        return inst, f"could not re-check the instance: {exc}"
    assert fresh is None or isinstance(fresh, Instance)
    return (fresh or inst), skip_reason(inst, fresh, now, want, pet=pet)


def skip_reason(last_seen: Instance, fresh: Instance | None, now: datetime,
                want: InstanceState = InstanceState.RUNNING, *, pet: bool = True
                ) -> str | None:
    """Why an action on `last_seen` must not go ahead now that the cloud shows `fresh`
    (None: gone), or None when it may. The one re-check rule, per instance or batched.
    `pet`: the action treats the instance as alone (stop, start, terminate), so it must not
    belong to a controller now; otherwise (scale_in) it must still be in the same group."""
    if fresh is None:
        return "the instance no longer exists"
    if pet and fresh.owner is not None:
        return f"it is managed by {fresh.owner} now ({fresh.owner.via})"
    if not pet and (fresh.owner is None or last_seen.owner is None
                    or (fresh.owner.kind, fresh.owner.name)
                    != (last_seen.owner.kind, last_seen.owner.name)):
        was = last_seen.owner or "no group"
        return f"it is no longer a member of {was} (now: {fresh.owner or 'no group'})"
    if fresh.instance_type != last_seen.instance_type:
        return (f"changed meanwhile: type is now {fresh.instance_type} "
                f"(was {last_seen.instance_type})")
    if abs(utc(fresh.launch_time) - utc(last_seen.launch_time)) > SAME_LAUNCH:
        return (f"changed meanwhile: relaunched at {utc(fresh.launch_time).isoformat()} "
                f"(was {utc(last_seen.launch_time).isoformat()})")
    if fresh.state is not want:
        return f"the instance is now {fresh.state}, not {want}"
    if is_protected(fresh):
        return f"{PROTECT_TAG} was set since the last inventory"
    until = snoozed_until(fresh)
    # a snooze tag already in inventory was weighed (and maybe cut to max_snooze) by the
    # state machine; only a new or changed one stops the call here
    renewed = fresh.tags.get(SNOOZE_TAG) != last_seen.tags.get(SNOOZE_TAG)
    if renewed and until is not None and until > now:
        return f"{SNOOZE_TAG} was set since the last inventory ({until.isoformat()})"
    return None
