"""Evaluate: does a policy apply to an instance, and does its condition hold right now?

Pure functions over domain values; the engine does the I/O. "No data is not idle": the
idle condition holds only on an IDLE verdict, never on NO_DATA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from functools import lru_cache

from costguard.actions.schedule import in_office_hours, why_outside
from costguard.minutes import Reading, covering, from_source
from costguard.model import Classification, Instance, InstanceState, TelemetrySource, Verdict
from costguard.policy.conditions import Condition, UnderusedCondition
from costguard.policy.filters import AgeFilter, Filters, TagFilter
from costguard.policy.schedule import OfficeHours
from costguard.policy.schema import Policy
from costguard.recommend.verdict import StoredVerdict
from costguard.telemetry.classify import classify
from costguard.telemetry.corroborate import HostVerdict


@dataclass(frozen=True)
class Finding:
    """The outcome of one policy on one instance that its filters selected."""

    policy: Policy
    instance: Instance
    holds: bool
    reason: str
    evidence: str
    usd_per_hour: float
    classification: Classification | None = None
    # set by the stop's checks (policy/stop_check.py): what the host showed, and the
    # untrusted minutes set aside
    host: HostVerdict | None = None
    untrusted: str = ""


def matches(policy: Policy, inst: Instance, now: datetime) -> bool:
    """True when the policy's kind, providers and filters select `inst`: an instance policy
    selects instances, a notebook policy notebooks (`Instance.kind`), and a volume, snapshot
    or address policy no instance (costguard/standing/ governs those)."""
    if policy.resource != inst.kind:
        return False
    if policy.providers and inst.provider not in policy.providers:
        return False
    return policy.filters is None or matches_filters(policy.filters, inst, now)


def tags_match(t: TagFilter, tags: Mapping[str, str]) -> bool:
    """`filters.tags` on an instance's (or a volume's) tags."""
    if any(k not in tags for k in t.present) or any(k in tags for k in t.absent):
        return False
    return all(tags.get(k) in allowed for k, allowed in t.values.items())


def age_matches(a: AgeFilter, age: timedelta) -> bool:
    """`filters.age` on the time since launch (or creation)."""
    if a.older_than is not None and age < a.older_than:
        return False
    return a.younger_than is None or age < a.younger_than


def matches_filters(f: Filters, inst: Instance, now: datetime) -> bool:
    # one check at a time, first miss returns: every instance meets every policy's filters
    if f.gpu is not None and f.gpu != inst.has_gpu:
        return False
    if f.state is not None and inst.state not in f.state:
        return False
    if f.instance_type is not None and not any(fnmatchcase(inst.instance_type, p)
                                               for p in f.instance_type):
        return False
    if f.family is not None and inst.family not in f.family:
        return False
    if f.lifecycle is not None and inst.lifecycle not in f.lifecycle:
        return False
    if f.accounts is not None and inst.account not in f.accounts:
        return False
    if f.regions is not None and inst.region not in f.regions:
        return False
    if f.tags is not None and not tags_match(f.tags, inst.tags):
        return False
    if f.managed is not None and f.managed != inst.managed:
        return False
    if f.owner_kind is not None and (inst.owner is None or inst.owner.kind not in f.owner_kind):
        return False
    if f.namespaces is not None and not any(fnmatchcase(inst.region, p) for p in f.namespaces):
        return False
    if f.kinds is not None and inst.instance_type not in f.kinds:
        return False
    if f.min_gpus is not None and inst.gpu_count < f.min_gpus:
        return False
    return f.age is None or age_matches(f.age, now - inst.launch_time)


def check_condition(
    cond: Condition, inst: Instance, minutes: Sequence[Reading], now: datetime,
    usd_per_hour: float, efficiency: StoredVerdict | None = None,
) -> tuple[bool, list[str], Classification | None]:
    """Every condition given must hold; returns (holds, reasons, idle classification).
    `efficiency` is the instance's stored verdict under the `underused` condition's
    thresholds (None: not judged yet)."""
    reasons: list[str] = []
    verdict: Classification | None = None
    if cond.idle is not None:
        idle = cond.idle
        start = now - idle.for_
        window = covering(minutes, start, now)
        unheard = ""  # what was not counted, where only the agent's readings count
        if idle.evidence == "agent":
            agents = from_source(window, TelemetrySource.AGENT)
            if len(agents) < len(window):
                n = len(window) - len(agents)
                unheard = (f"; {n} cloud reading{'s' if n > 1 else ''} not counted (idle "
                           "evidence: the agent's only)")
            window = agents
        verdict = classify(window, window_start=start, window_end=now,
                           gpu_count=max(inst.gpu_count, 1), signal=idle.signal,
                           below=idle.below, min_coverage=idle.min_coverage)
        if verdict.verdict is not Verdict.IDLE:
            return False, [f"not idle ({verdict.verdict}): {verdict.evidence}{unheard}"], verdict
        reasons.append(f"idle: {verdict.evidence}")
    if cond.underused is not None:
        holds, why = underused_holds(cond.underused, efficiency)
        if not holds:
            return False, [why], verdict
        reasons.append(why)
    if cond.running_longer_than is not None:
        ran = now - inst.launch_time
        if inst.state is not InstanceState.RUNNING or ran < cond.running_longer_than:
            return False, ["not running long enough"], verdict
        reasons.append(f"running for {_hours(ran.total_seconds())}")
    if cond.missing_tags:
        missing = [k for k in cond.missing_tags if not inst.tags.get(k)]
        if not missing:
            return False, ["has the required tags"], verdict
        reasons.append("missing tags: " + ", ".join(missing))
    if cond.outside_hours is not None:
        outside = _outside_hours(cond.outside_hours, now)
        if outside is None:
            return False, ["inside office hours"], verdict
        reasons.append("outside office hours: " + outside)
    if cond.cost_over is not None:
        if usd_per_hour <= cond.cost_over.hourly_usd:
            return False, ["cost under threshold"], verdict
        reasons.append(f"costs ${usd_per_hour:,.2f}/h")
    return True, reasons, verdict


def underused_holds(cond: UnderusedCondition, v: StoredVerdict | None) -> tuple[bool, str]:
    """Whether the stored verdict `v` makes the instance underused under `cond`, and why."""
    if v is None:
        return False, "not judged yet (a verdict needs a day of readings): not underused"
    e = v.efficiency
    if not e.underused:
        return False, f"not underused ({e.bottleneck})"
    if cond.bottleneck is not None and e.bottleneck not in cond.bottleneck:
        return False, (f"underused, but {e.bottleneck}, not "
                       + " or ".join(cond.bottleneck))
    if v.monthly_usd < cond.min_monthly_savings_usd:
        saves = f"its fit saves ${v.monthly_usd:,.0f}/month" if v.fit_to else "no cheaper fit"
        return False, (f"underused, but {saves}, under "
                       f"${cond.min_monthly_savings_usd:,.0f}/month")
    return True, "underused: " + v.summary()


def evaluate(
    policy: Policy, inst: Instance, minutes: Sequence[Reading], now: datetime,
    usd_per_hour: float, efficiency: StoredVerdict | None = None,
) -> Finding | None:
    """None when the policy does not select `inst`; else a Finding saying if it holds."""
    if not matches(policy, inst, now):
        return None
    return judge(policy, inst, minutes, now, usd_per_hour, efficiency)


def judge(
    policy: Policy, inst: Instance, minutes: Sequence[Reading], now: datetime,
    usd_per_hour: float, efficiency: StoredVerdict | None = None,
) -> Finding:
    """The Finding of a policy that selects `inst` (`matches`): whether its condition
    holds, and why."""
    holds, reasons, verdict = check_condition(policy.condition, inst, minutes, now,
                                              usd_per_hour, efficiency)
    return Finding(policy=policy, instance=inst, holds=holds, reason="; ".join(reasons),
                   evidence=verdict.evidence if verdict else "; ".join(reasons),
                   usd_per_hour=usd_per_hour, classification=verdict)


@lru_cache(maxsize=64)
def _outside_hours(hours: OfficeHours, now: datetime) -> str | None:
    """Why `now` is outside `hours`, or None inside them: the same for every instance a
    policy looks at in a cycle, so worked out once per (calendar, now), not per instance."""
    return None if in_office_hours(hours, now) else why_outside(hours, now)


def _hours(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"
