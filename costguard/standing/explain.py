"""`costguard explain VOLUME|SNAPSHOT|ADDRESS|RESERVATION`: why costguard did, or did not,
warn of or delete one resource that bills while nothing runs.

What the last listing saw (what uses it, since when it is unused, its price and where the
price comes from, its team), the guards (protect, snooze), every policy of its kind (do
its filters select it, does its condition hold, the episode's state and deadline) and the
journal, newest first. Pure reads of the store, as the instances' explain.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session, col, select

from costguard.actions.safety import protects, snooze_tag_until
from costguard.clock import utc
from costguard.policy.schema import Policy, PolicySet
from costguard.standing.evaluate import evaluate
from costguard.standing.model import Standing, StandingKind, from_row
from costguard.store.tables import ActionJournalRow, PolicyStateRow, StandingRow

JOURNAL_LINES = 10


def find(s: Session, ref: str) -> list[StandingRow]:
    """The stored resources whose id, or else whose name, is `ref`."""
    rows = list(s.exec(select(StandingRow).where(StandingRow.resource_id == ref)))
    return rows or list(s.exec(select(StandingRow).where(StandingRow.name == ref)))


@dataclass
class StandingAnswer:
    policy: str
    mode: str
    selected: bool
    holds: bool
    reason: str
    outcome: str
    state: dict[str, Any] | None

    def as_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "mode": self.mode, "selected": self.selected,
                "condition_holds": self.holds, "reason": self.reason,
                "outcome": self.outcome, "state": self.state}


@dataclass
class StandingExplanation:
    item: Standing
    gone: bool
    team: str | None
    last_listed: datetime
    protected: bool
    snoozed_until: datetime | None
    policies: list[StandingAnswer]
    journal: list[dict[str, Any]]
    demo: bool = False

    def as_json(self) -> dict[str, Any]:
        i = self.item
        return {
            "resource": {"provider": i.provider, "kind": str(i.kind), "id": i.resource_id,
                         "name": i.name, "account": i.account, "region": i.region,
                         "zone": i.zone, "state": i.state, "in_use": i.in_use,
                         "used_by": list(i.used_by), "size_gb": i.size_gb,
                         "detail": i.detail, "tags": dict(i.tags), "team": self.team,
                         "gone": self.gone,
                         "reservation": (i.reservation.model_dump(mode="json")
                                         if i.reservation else None)},
            "last_listed": self.last_listed.isoformat(),
            "unused_since": i.unused_since.isoformat() if i.unused_since else None,
            "usd_per_month": i.usd_per_month, "price_source": i.price_source,
            "protected": self.protected,
            "snoozed_until": self.snoozed_until.isoformat() if self.snoozed_until else None,
            "policies": [p.as_json() for p in self.policies], "journal": self.journal}

    def lines(self) -> list[str]:
        i, out = self.item, []
        name = f" ({i.name})" if i.name and i.name != i.resource_id else ""
        price = (f"${i.usd_per_month:,.2f}/month" if i.usd_per_month is not None
                 else "unpriced") + (f" ({i.price_source})" if i.price_source else "")
        out.append(f"{i.kind} {i.resource_id}{name}: {i.provider} {i.account} "
                   f"{i.zone or i.region}, {i.detail or i.state}, {price}")
        listed = f"{self.last_listed:%Y-%m-%d %H:%M} UTC"
        out.append(f"Gone since {listed} (no longer listed)." if self.gone
                   else f"As last listed, {listed}.")
        out.append(f"Team: {self.team or 'none (unattributed)'}.")
        out.append("Use: " + _use_words(i))
        guards = [("protected by costguard:protect: never warned of or deleted"
                   if self.protected else "not protected"),
                  (f"snoozed until {self.snoozed_until:%Y-%m-%d %H:%M} UTC"
                   if self.snoozed_until else "not snoozed")]
        out.append("Guards: " + "; ".join(guards) + ".")
        if self.demo:
            out.append("Policies: the demo's, as it ran them: every one enforced.")
        if not self.policies:
            out.append(f"No policy governs {i.kind}s (docs/policies.md, Resource kinds).")
        for p in self.policies:
            out.append("")
            out.append(f"{p.policy} ({p.mode}): {p.outcome}")
            if p.state:
                st = p.state
                extra = f", deadline {st['deadline']}" if st.get("deadline") else ""
                out.append(f"  state: {st['state']} since {st['since']}{extra}")
        out.append("")
        if not self.journal:
            out.append(f"Journal: nothing recorded for this {i.kind}.")
        else:
            out.append(f"Journal (last {len(self.journal)}):")
            for j in self.journal:
                detail = f": {j['detail']}" if j["detail"] else ""
                dry = " (dry run)" if j["dry_run"] else ""
                out.append(f"  {j['at'][:16].replace('T', ' ')} {j['policy']} {j['action']} "
                           f"{j['status']}{dry}{detail}")
        return out


def _use_words(i: Standing) -> str:
    since = (f"; unused since {i.unused_since:%Y-%m-%d %H:%M} UTC" if i.unused_since
             and not i.in_use else "")
    if i.reservation is not None:
        r = i.reservation
        twins = f"; on demand beside it: {', '.join(r.twins)}" if r.twins else ""
        return f"{r.used} of {r.capacity} {r.instance_type} running in it{since}{twins}."
    if i.in_use:
        return f"in use by {', '.join(i.used_by) or 'something running'}."
    held = f"held by {', '.join(i.used_by)} (not running)" if i.used_by else "used by nothing"
    return f"{held}{since}."


def _when(t: datetime | None) -> str | None:
    return f"{utc(t):%Y-%m-%d %H:%M} UTC" if t is not None else None


def _short_of(policy: Policy, item: Standing, now: datetime) -> str:
    """Why the condition does not hold, in words."""
    unused = policy.condition.unused
    if item.in_use:
        return ": in use"
    if unused is not None and item.unused_since is not None \
            and now - item.unused_since < unused.for_:
        return (f": unused for {_days(now - item.unused_since)}, fewer than "
                f"{_days(unused.for_)}")
    return ": no tag it names is missing"


def _days(span: timedelta) -> str:
    return f"{span.days}d" if span.days else f"{int(span.total_seconds() // 3600)}h"


def _outcome(policy: Policy, item: Standing, selected: bool, holds: bool, reason: str,
             row: PolicyStateRow | None, protected: bool, now: datetime) -> str:
    if not selected:
        return "its filters do not select it"
    if protected:
        return "never warned of: it is protected"
    if not holds:
        return "its condition does not hold" + _short_of(policy, item, now)
    delete = policy.delete_action
    if delete is not None and item.used_by:
        return (f"its condition holds ({reason}), but {', '.join(item.used_by)} holds it: a "
                "policy that deletes never warns of it")
    state = row.state if row is not None else None
    if state == "warned" and row is not None and row.deadline is not None:
        verb = "released" if item.kind is StandingKind.ADDRESS else "deleted"
        return (f"its condition holds ({reason}): warned, it will be {verb} at "
                f"{_when(row.deadline)} unless used, protected or snoozed (re-checked first)")
    if state == "snapshotting":
        return f"its condition holds ({reason}): its snapshot is being taken; deleted after"
    if state in ("acted", "failed"):
        return f"its condition holds ({reason}): this episode ended ({state})"
    return f"its condition holds ({reason}): it is noticed at the next cycle"


def explain(s: Session, ref: str, policies: PolicySet, now: datetime, *,
            demo: bool = False) -> StandingExplanation | None:
    """Explain stored resource `ref` (an id or name) against `policies`; None when no
    volume, snapshot, address or reservation is stored by that id or name. Several by one
    name: the most recently listed."""
    rows = find(s, ref)
    if not rows:
        return None
    row = max(rows, key=lambda r: utc(r.last_seen))
    item = from_row(row)
    states = {r.policy: r for r in s.exec(select(PolicyStateRow).where(
        PolicyStateRow.provider == row.provider,
        PolicyStateRow.instance_id == row.resource_id))}
    protected = protects(item.tags)
    snoozed = snooze_tag_until(item.tags)
    answers = []
    for p in policies.policies:
        if p.resource != item.kind:
            continue
        found = evaluate(p, item, now)  # None: its filters do not select it
        selected = found is not None
        holds = found is not None and found.holds
        reason = found.reason if found is not None else ""
        state = states.get(p.name)
        answers.append(StandingAnswer(
            policy=p.name, mode="enforce" if p.is_enforced else "dry-run", selected=selected,
            holds=holds, reason=reason,
            outcome=_outcome(p, item, selected, holds, reason, state, protected, now),
            state=None if state is None else {"state": state.state,
                                              "since": _when(state.since),
                                              "deadline": _when(state.deadline)}))
    journal = s.exec(select(ActionJournalRow).where(
        ActionJournalRow.provider == row.provider,
        ActionJournalRow.instance_id == row.resource_id)
        .order_by(col(ActionJournalRow.id).desc()).limit(JOURNAL_LINES))
    return StandingExplanation(
        item=item, gone=row.gone, team=row.team, last_listed=utc(row.last_seen),
        protected=protected,
        snoozed_until=snoozed if snoozed is not None and snoozed > now else None,
        policies=answers, demo=demo,
        journal=[{"at": utc(j.intent_at).isoformat(), "policy": j.policy, "action": j.action,
                  "status": j.status, "dry_run": j.dry_run, "detail": j.detail}
                 for j in journal])
