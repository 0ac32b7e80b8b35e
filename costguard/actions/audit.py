"""The audit trail: every finding, warning, snooze, action and skip, in time order.

Read-only over two append-only tables: `findings` (what a policy found, with evidence) and
`action_journal` (what was done or refused, with the reason). Nothing here writes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

from sqlmodel import Session, col, select

from costguard.store.tables import ActionJournalRow, FindingRow


@dataclass(frozen=True)
class AuditEvent:
    at: datetime
    kind: str  # finding | notify | tag | stop | start | terminate | snooze | skip | interrupted
    status: str  # found | done | dry-run | skipped | failed | interrupted | intent | seen
    policy: str
    provider: str
    instance_id: str
    dry_run: bool
    usd_per_hour: float
    detail: str
    evidence: str = ""

    def as_json(self) -> dict[str, object]:
        d = asdict(self)
        d["at"] = self.at.isoformat()
        return d


def audit_events(session: Session, since: datetime, until: datetime | None = None, *,
                 instance_id: str | None = None, policy: str | None = None,
                 kinds: Sequence[str] = ()) -> list[AuditEvent]:
    """Events in [since, until), oldest first, optionally for one instance/policy/kinds."""
    events: list[AuditEvent] = []
    if not kinds or "finding" in kinds:
        fq = select(FindingRow).where(col(FindingRow.observed_at) >= since)
        if until is not None:
            fq = fq.where(col(FindingRow.observed_at) < until)
        if instance_id:
            fq = fq.where(FindingRow.instance_id == instance_id)
        if policy:
            fq = fq.where(FindingRow.policy == policy)
        events += [AuditEvent(f.observed_at, "finding", "found", f.policy, f.provider,
                              f.instance_id, False, f.usd_per_hour, f.reason, f.evidence)
                   for f in session.exec(fq)]
    jq = select(ActionJournalRow).where(col(ActionJournalRow.intent_at) >= since)
    if until is not None:
        jq = jq.where(col(ActionJournalRow.intent_at) < until)
    if instance_id:
        jq = jq.where(ActionJournalRow.instance_id == instance_id)
    if policy:
        jq = jq.where(ActionJournalRow.policy == policy)
    if kinds:
        jq = jq.where(col(ActionJournalRow.action).in_(list(kinds)))
    events += [AuditEvent(j.intent_at, j.action, j.status, j.policy, j.provider, j.instance_id,
                          j.dry_run, j.usd_per_hour, j.detail)
               for j in session.exec(jq.order_by(col(ActionJournalRow.id)))]
    events.sort(key=lambda e: (e.at, e.kind != "finding"))
    return events


def to_json(events: Sequence[AuditEvent]) -> str:
    return json.dumps([e.as_json() for e in events], indent=2)
