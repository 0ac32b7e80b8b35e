"""Actions that are coming: instances warned (a deadline set) or snoozed, with why.

The console's pending-actions page and `/api/v1/pending` read this; the act stage writes
the states it reads (`PolicyStateRow`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func
from sqlmodel import Session, col, select

from costguard.clock import utc
from costguard.costs.attribution import Attributor
from costguard.store.inventory import to_instance
from costguard.store.tables import CostIntervalRow, InstanceRow, PolicyStateRow

PENDING_STATES = ("warned", "snoozed")


@dataclass(frozen=True)
class PendingAction:
    policy: str
    provider: str
    instance_id: str
    name: str | None
    instance_type: str
    team: str | None
    state: str  # warned | snoozed
    since: datetime
    deadline: datetime | None  # when it acts unless the instance gets busy
    snooze_until: datetime | None
    evidence: str
    # the policy's mode now: enforce acts at the deadline; dry-run records what it would do
    # and alerts nobody; unknown: the policy is no longer loaded
    mode: str = "unknown"

    def as_json(self) -> dict[str, Any]:
        def iso(when: datetime | None) -> str | None:
            return when.isoformat() if when is not None else None

        return {"policy": self.policy, "provider": self.provider,
                "instance_id": self.instance_id, "name": self.name,
                "instance_type": self.instance_type, "team": self.team, "state": self.state,
                "since": self.since.isoformat(), "deadline": iso(self.deadline),
                "snooze_until": iso(self.snooze_until), "evidence": self.evidence,
                "mode": self.mode}


def pending_actions(session: Session, modes: Mapping[str, str] | None = None,
                    attributor: Attributor | None = None) -> list[PendingAction]:
    """Warned and snoozed (policy, instance) pairs of instances still listed, soonest
    deadline first (snoozed ones after, by the end of their snooze). `modes`: each loaded
    policy's mode (enforce or dry-run), which says what will actually happen. `attributor`:
    the team of an instance no cost interval has attributed yet (after the first cycle,
    before any spend accrued) from its tags now, not "unattributed"."""
    modes = modes or {}
    rows = session.exec(
        select(PolicyStateRow, InstanceRow)
        .join(InstanceRow, (col(InstanceRow.provider) == col(PolicyStateRow.provider))
              & (col(InstanceRow.instance_id) == col(PolicyStateRow.instance_id)))
        .where(col(PolicyStateRow.state).in_(PENDING_STATES),
               col(InstanceRow.gone).is_(False))).all()
    teams = _teams(session, [(st.provider, st.instance_id) for st, _ in rows])
    if attributor is not None:
        for _, inst in rows:
            key = (inst.provider, inst.instance_id)
            if teams.get(key) is None and key not in teams:
                teams[key] = attributor.dimensions(to_instance(inst)).get("team")
    out = [PendingAction(
        policy=st.policy, provider=st.provider, instance_id=st.instance_id, name=inst.name,
        instance_type=inst.instance_type, team=teams.get((st.provider, st.instance_id)),
        state=st.state, since=utc(st.since),
        deadline=utc(st.deadline) if st.deadline is not None else None,
        snooze_until=utc(st.snooze_until) if st.snooze_until is not None else None,
        evidence=st.evidence, mode=modes.get(st.policy, "unknown")) for st, inst in rows]
    far = datetime.max.replace(tzinfo=out[0].since.tzinfo) if out else None
    out.sort(key=lambda p: (p.state != "warned", p.deadline or p.snooze_until or far,
                            p.instance_id, p.policy))
    return out


def _teams(session: Session, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """Each instance's team as its latest cost interval attributed it."""
    if not keys:
        return {}
    ci = CostIntervalRow
    last = (select(col(ci.provider).label("p"), col(ci.instance_id).label("i"),
                   func.max(col(ci.start)).label("s"))
            .where(col(ci.instance_id).in_(sorted({i for _, i in keys})))
            .group_by(col(ci.provider), col(ci.instance_id)).subquery())
    stmt = select(col(ci.provider), col(ci.instance_id), col(ci.team)).join(
        last, and_(col(ci.provider) == last.c.p, col(ci.instance_id) == last.c.i,
                   col(ci.start) == last.c.s))
    return {(str(p), str(i)): team for p, i, team in session.execute(stmt)}
