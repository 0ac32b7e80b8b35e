"""`costguard explain INSTANCE`: why costguard did, or did not, act on one instance.

Every policy: the filters it passed or failed, its condition re-checked with the same
`check_condition` the daemon runs (on the stored telemetry, as of the last cycle), what keeps
it from acting (protection, snooze, the owner, dry-run, the pause switch), where its state
stands, and the journal's last entries. It only reads the store; no cloud is called.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session, col, select

from costguard.actions.safety import is_protected, pet_refusal, protects, snoozed_until
from costguard.clock import utc
from costguard.costs.pricing import PriceCatalog
from costguard.errors import CostguardError
from costguard.model import GpuMinute, Instance
from costguard.policy.evaluate import Finding, check_condition
from costguard.policy.explain import Check, filter_checks
from costguard.policy.kinds import KINDS
from costguard.policy.schema import Policy, PolicySet
from costguard.policy.stop_check import held_back, judge
from costguard.recommend import stored
from costguard.recommend.settings import RecommendSettings
from costguard.recommend.verdict import StoredVerdict, judged_with
from costguard.store import control
from costguard.store.inventory import to_instance
from costguard.store.readings import read_minutes
from costguard.store.tables import (
    ActionJournalRow,
    CostIntervalRow,
    CycleRow,
    InstanceRow,
    PolicyStateRow,
)
from costguard.telemetry.corroborate import host_activity
from costguard.telemetry.trust import describe, untrusted

JOURNAL_LINES = 10
DEFAULT_LOOKBACK = timedelta(hours=1)  # telemetry shown when no policy has an idle window


class UnknownInstance(CostguardError, LookupError):
    """No instance (or more than one) by that id or name."""


@dataclass
class PolicyAnswer:
    policy: str
    mode: str
    checks: list[Check]
    selected: bool
    holds: bool = False  # the condition, checked whether or not the filters select it
    reasons: list[str] = field(default_factory=list)
    outcome: str = ""  # one line: what it did, will do, or why not
    state: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "mode": self.mode, "selected": self.selected,
                "filters": [{"filter": c.name, "passed": c.passed, "detail": c.detail}
                            for c in self.checks],
                "condition_holds": self.holds, "reasons": self.reasons,
                "outcome": self.outcome, "state": self.state}


@dataclass
class Explanation:
    instance: Instance
    at: datetime
    at_what: str  # "the last cycle" or "now"
    usd_per_hour: float
    price_source: str
    protected: bool
    snoozed_until: datetime | None
    paused: bool
    telemetry: dict[str, Any]
    policies: list[PolicyAnswer]
    journal: list[dict[str, Any]]
    efficiency: StoredVerdict | None = None  # the stored verdict under `recommend:`
    demo: bool = False  # judged by a demo's policies, enforced as the demo ran them

    def as_json(self) -> dict[str, Any]:
        inst = self.instance
        return {
            "instance": {"provider": inst.provider, "id": inst.instance_id, "name": inst.name,
                         "account": inst.account, "region": inst.region,
                         "instance_type": inst.instance_type, "state": str(inst.state),
                         "lifecycle": str(inst.lifecycle), "gpus": inst.gpu_count,
                         "owner": str(inst.owner) if inst.owner else None,
                         "tags": dict(inst.tags)},
            "as_of": self.at.isoformat(), "as_of_what": self.at_what,
            "usd_per_hour": self.usd_per_hour, "price_source": self.price_source,
            "protected": self.protected,
            "snoozed_until": self.snoozed_until.isoformat() if self.snoozed_until else None,
            "paused": self.paused, "telemetry": self.telemetry,
            "efficiency": None if self.efficiency is None else {
                "judged_at": self.efficiency.judged_at.isoformat(),
                "bottleneck": str(self.efficiency.efficiency.bottleneck),
                "underused": self.efficiency.efficiency.underused,
                "summary": self.efficiency.summary(), "fit": self.efficiency.fit_to,
                "monthly_savings_usd": self.efficiency.monthly_usd},
            "policies": [p.as_json() for p in self.policies], "journal": self.journal,
        }

    def lines(self) -> list[str]:
        inst, out = self.instance, []
        name = f" ({inst.name})" if inst.name and inst.name != inst.instance_id else ""
        out.append(f"{inst.instance_id}{name}: {inst.provider} {inst.account} {inst.region}, "
                   f"{inst.instance_type}, {inst.state}, {inst.lifecycle}, "
                   f"${self.usd_per_hour:,.2f}/h ({self.price_source})")
        out.append(f"As of {self.at:%Y-%m-%d %H:%M} UTC ({self.at_what}).")
        if self.demo:  # say why the example policies, dry-run in their files, read `enforce`
            out.append("Policies: the demo's, as it ran them: every one enforced, on the "
                       "simulated cloud only (in their files they stay as written).")
        out.append("Owner: " + (f"{inst.owner} ({inst.owner.via})" if inst.owner
                                else "none: nothing else starts or replaces it"))
        guards = [("protected by costguard:protect: never acted on" if self.protected
                   else "not protected"),
                  (f"snoozed until {self.snoozed_until:%Y-%m-%d %H:%M} UTC"
                   if self.snoozed_until else "not snoozed"),
                  "actions PAUSED (costguard resume)" if self.paused else "actions not paused"]
        out.append("Guards: " + "; ".join(guards) + ".")
        t = self.telemetry
        out.append(f"Telemetry: {t['summary']}")
        if inst.has_gpu:
            v = self.efficiency
            out.append("Efficiency: " + (
                f"{v.summary()} (judged {v.judged_at:%Y-%m-%d %H:%M} UTC; costguard "
                "recommend has the evidence)" if v else
                "not judged yet (the cycle judges each GPU instance once a day, from a day "
                "of readings or more)"))
        for p in self.policies:
            out.append("")
            out.append(f"{p.policy} ({p.mode}): {p.outcome}")
            for c in p.checks:
                out.append(f"  {'pass' if c.passed else 'FAIL'} {c.name}: {c.detail}")
            verb = ("holds" if p.holds else "does not hold") if p.selected else (
                "would hold" if p.holds else "would not hold")
            out.append(f"  condition {verb}: " + ("; ".join(p.reasons) or "-"))
            if p.state:
                s = p.state
                extra = "".join(f", {k} {s[k]}" for k in ("deadline", "snooze_until") if s[k])
                out.append(f"  state: {s['state']} since {s['since']}{extra}")
        out.append("")
        if not self.journal:
            out.append("Journal: nothing recorded for this instance.")
        else:
            out.append(f"Journal (last {len(self.journal)}):")
            for j in self.journal:
                detail = f": {j['detail']}" if j["detail"] else ""
                dry = " (dry run)" if j["dry_run"] else ""
                out.append(f"  {j['at'][:16].replace('T', ' ')} {j['policy']} {j['action']} "
                           f"{j['status']}{dry}{detail}")
        return out


def find_instance(s: Session, ref: str) -> Instance:
    """The stored instance whose id, or else whose name, is `ref`."""
    rows = list(s.exec(select(InstanceRow).where(InstanceRow.instance_id == ref)))
    if not rows:
        rows = list(s.exec(select(InstanceRow).where(InstanceRow.name == ref)))
    if not rows:
        raise UnknownInstance(f"no instance {ref!r} in the store (an id such as i-0abc..., "
                              "or a name; or a volume, snapshot, address or reservation "
                              "id); `costguard report --by instance` lists instances")
    if len(rows) > 1:
        ids = ", ".join(f"{r.provider}:{r.instance_id}" for r in rows[:10])
        raise UnknownInstance(f"{len(rows)} instances match {ref!r} ({ids}): name one by id")
    return to_instance(rows[0])


def explain(s: Session, ref: str, policies: PolicySet, catalog: PriceCatalog,
            now: datetime, *, at: datetime | None = None,
            recommend: RecommendSettings | None = None, demo: bool = False) -> Explanation:
    """Explain `ref` (an id or a name) against `policies` as of `at` (default: the start of
    the last cycle, else `now`). An `underused:` condition is checked on the verdict stored
    under its thresholds (`recommend` and its own), as the cycle checks it. `demo`: the
    policies are a demo's, enforced as it ran them."""
    inst = find_instance(s, ref)
    asked = at is not None
    at_what = "the time asked for"
    if at is None:
        last = s.exec(select(CycleRow).order_by(col(CycleRow.started_at).desc())).first()
        at, at_what = (utc(last.started_at), "the last cycle") if last else (now, "now")
    usd, source = _price(s, inst, at, catalog)
    windows = [p.condition.idle.for_ for p in policies.policies if p.condition.idle]
    lookback = max(windows, default=DEFAULT_LOOKBACK)
    ref_key = (inst.provider, inst.instance_id)
    minutes = read_minutes(s, [ref_key], at - lookback, at).get(ref_key, [])
    states = {r.policy: r for r in s.exec(select(PolicyStateRow).where(
        PolicyStateRow.provider == inst.provider, PolicyStateRow.instance_id == inst.instance_id))}
    entries = select(ActionJournalRow).where(
        ActionJournalRow.provider == inst.provider,
        ActionJournalRow.instance_id == inst.instance_id)
    if asked:  # what was known then
        entries = entries.where(col(ActionJournalRow.intent_at) <= at)
    journal = list(s.exec(entries.order_by(col(ActionJournalRow.id).desc())
                          .limit(JOURNAL_LINES)))
    last_entry = {j.policy: j for j in reversed(journal)}  # newest last: it wins
    paused = control.is_paused(s)
    snoozed = snoozed_until(inst)
    base = recommend or RecommendSettings()

    def verdict(p: Policy) -> StoredVerdict | None:
        under = p.condition.underused
        return None if under is None else stored.load_one(s, judged_with(base, under),
                                                          ref_key, at)

    answers = [_answer(p, inst, minutes, at, usd, states.get(p.name), last_entry.get(p.name),
                       paused=paused, efficiency=verdict(p))
               for p in policies.policies
               if not KINDS[p.resource].standing]  # volume, snapshot, address policies
    return Explanation(
        instance=inst, at=at, at_what=at_what, usd_per_hour=usd, price_source=source,
        protected=is_protected(inst), snoozed_until=snoozed if snoozed and snoozed > at else None,
        paused=paused, telemetry=_telemetry(inst, minutes, at, lookback),
        policies=answers, efficiency=stored.load_one(s, base, ref_key, at), demo=demo,
        journal=[{"at": utc(j.intent_at).isoformat(), "policy": j.policy, "action": j.action,
                  "status": j.status, "dry_run": j.dry_run, "detail": j.detail,
                  "usd_per_hour": j.usd_per_hour} for j in journal])


def _price(s: Session, inst: Instance, at: datetime, catalog: PriceCatalog
           ) -> tuple[float, str]:
    """The running rate the daemon last accrued this instance at (what its policies were
    judged with); the catalog's price where it never ran while costguard watched."""
    accrued = s.exec(select(CostIntervalRow).where(
        CostIntervalRow.provider == inst.provider, CostIntervalRow.instance_id == inst.instance_id,
        CostIntervalRow.state == "running", CostIntervalRow.start <= at,
    ).order_by(col(CostIntervalRow.start).desc())).first()
    if accrued is not None:
        return accrued.usd_per_hour, accrued.price_source or "as accrued"
    quote = catalog.quote(inst)
    if quote is not None:
        return quote.usd_per_hour, quote.source
    # what never accrues (a Kubernetes workload: its nodes do) was priced when acted on
    acted = s.exec(select(ActionJournalRow).where(
        ActionJournalRow.provider == inst.provider,
        ActionJournalRow.instance_id == inst.instance_id, ActionJournalRow.usd_per_hour > 0,
        ActionJournalRow.intent_at <= at,
    ).order_by(col(ActionJournalRow.intent_at).desc())).first()
    if acted is not None:
        return acted.usd_per_hour, f"as priced when {acted.action} was journaled"
    return 0.0, "no price known"


def _telemetry(inst: Instance, minutes: list[GpuMinute], at: datetime,
               lookback: timedelta) -> dict[str, Any]:
    span = int(lookback.total_seconds() // 60)
    if not inst.has_gpu:
        return {"sources": [], "gpu_minutes": 0, "last": None,
                "summary": "no GPU: idle-GPU conditions never hold for it"}
    sources = sorted({str(m.source) for m in minutes})
    covered = sum(m.span_minutes for m in minutes)
    wanted = span * max(inst.gpu_count, 1)
    last = max((m.minute for m in minutes), default=None)
    if last is None:
        summary = (f"no GPU readings in the {span} min before then: no data is never idle, "
                   "so no idle condition holds (is the agent running, or the cloud's GPU "
                   "metrics published?)")
    else:
        summary = (f"{covered} of {wanted} GPU-minutes in the {span} min before then, from "
                   f"{', '.join(sources)}; the last at {utc(last):%H:%M}")
    found = describe(untrusted(minutes))
    host = host_activity(minutes, at).evidence if last is not None else ""
    summary += "".join(f". {part[0].upper()}{part[1:]}" for part in (found, host) if part)
    return {"sources": sources, "gpu_minutes": covered, "wanted_gpu_minutes": wanted,
            "last": utc(last).isoformat() if last else None, "summary": summary,
            "untrusted": found or None, "host": host or None}


def _acts(policy: Policy, inst: Instance) -> str | None:
    """The acting step a policy takes on `inst` when its condition holds (None: notices
    only): a group's member is shrunk out of its group where the policy says how, a pet
    stopped; a stop of a member is refused (the outcome says so)."""
    member = inst.owner is not None
    steps = ((("scale_to_zero", policy.scale_to_zero_action),
               ("scale_in", policy.scale_in_action)) if member else ()) + (
        ("stop", policy.stop_action), ("terminate", policy.terminate_action),
        ("tag", policy.tag_action))
    return next((name for name, step in steps if step is not None), None)


def _answer(policy: Policy, inst: Instance, minutes: list[GpuMinute], at: datetime,
            usd: float, state: PolicyStateRow | None, last: ActionJournalRow | None,
            *, paused: bool, efficiency: StoredVerdict | None = None) -> PolicyAnswer:
    checks = filter_checks(policy, inst, at)
    selected = all(c.passed for c in checks)
    answer = PolicyAnswer(policy=policy.name, mode=policy.mode, checks=checks,
                          selected=selected, state=_state(state))
    holds, reasons, verdict = check_condition(policy.condition, inst, minutes, at, usd,
                                              efficiency)
    finding = judge(Finding(policy=policy, instance=inst, holds=holds,
                            reason="; ".join(reasons), evidence="; ".join(reasons),
                            usd_per_hour=usd, classification=verdict), minutes, at)
    if finding.holds != holds or finding.host is not None:  # the stop's checks spoke
        holds, reasons = finding.holds, [finding.reason]
    answer.holds, answer.reasons = holds, reasons
    if selected and held_back(finding):
        answer.outcome = ("idle on its GPUs, but the stop is held back, so nothing is due: "
                          + finding.reason)
        return answer
    if not selected:
        failed = [c.name for c in checks if not c.passed]
        answer.outcome = (f"does not select it ({', '.join(failed)} failed), so it never "
                          f"acts on it; its condition {'would' if holds else 'would not'} "
                          "hold")
        return answer
    answer.outcome = _outcome(policy, inst, holds, at, state, last, paused=paused)
    return answer


def _outcome(policy: Policy, inst: Instance, holds: bool, at: datetime,
             state: PolicyStateRow | None, last: ActionJournalRow | None, *,
             paused: bool) -> str:
    acts = _acts(policy, inst)
    said = (f"; the journal's last entry: {last.action} {last.status}"
            + (f" ({last.detail})" if last.detail else "")) if last is not None else ""
    if not holds:
        return "its condition does not hold, so nothing is due" + said
    if acts is None:
        return "its condition holds: it notifies, it never acts" + said
    if is_protected(inst):
        where = "the instance" if protects(inst.tags) else f"its owner {inst.owner}"
        return f"its condition holds, but costguard:protect on {where} keeps every action off"
    snooze = snoozed_until(inst)
    if state is not None and state.snooze_until is not None:
        snooze = max(filter(None, [snooze, utc(state.snooze_until)]))
    if snooze is not None and snooze > at:
        return f"its condition holds, but it is snoozed until {snooze:%Y-%m-%d %H:%M} UTC"
    if paused:
        return "its condition holds, but actions are paused (costguard resume)" + said
    if not policy.is_enforced:
        return (f"its condition holds: it would {acts} ({policy.mode}: it records what it "
                "would do; `mode: enforce` lets it act)" + said)
    if acts == "stop" and inst.owner is not None:
        refusal = pet_refusal(inst, "stop")
        return f"its condition holds, but {refusal}" + said
    if state is not None and state.state == "warned" and state.deadline is not None:
        return (f"its condition holds: warned, it will {acts} at "
                f"{utc(state.deadline):%Y-%m-%d %H:%M} UTC unless it gets busy" + said)
    return f"its condition holds: it {acts}s (enforced)" + said


def _state(row: PolicyStateRow | None) -> dict[str, Any] | None:
    if row is None:
        return None

    def when(t: datetime | None) -> str | None:
        return f"{utc(t):%Y-%m-%d %H:%M} UTC" if t is not None else None

    return {"state": row.state, "since": when(row.since), "deadline": when(row.deadline),
            "snooze_until": when(row.snooze_until), "episode": row.episode,
            "evidence": row.evidence}
