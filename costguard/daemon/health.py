"""Health that tells the truth: cycles that finish "ok" while a scope cannot be read (the
cloud unreachable, a role gone) are not a healthy service. Shared by /readyz and
`costguard status`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import func
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from costguard.alerts.queue import count_unconfirmed
from costguard.clock import utc
from costguard.store import control
from costguard.store.tables import ActionJournalRow, AgentProofRow, AlertRow, CycleRow, GapRow

if TYPE_CHECKING:
    from costguard.store.db import Database

PROVEN_RECENTLY = timedelta(hours=2)  # two credential lifetimes: an agent re-proves hourly
DEGRADED_AFTER_CYCLES = 3  # a scope unreadable for longer than this many poll intervals


def unreadable(s: Session, now: datetime, poll: timedelta,
               cycles: int = DEGRADED_AFTER_CYCLES) -> list[str]:
    """Scopes (inventory or metrics) that have been unreadable for more than `cycles` poll
    intervals, as "provider scope (since ...)"."""
    since = now - poll * cycles
    rows = s.exec(select(GapRow).where(col(GapRow.resolved_at).is_(None),
                                       col(GapRow.first_seen) < since))
    return [f"{g.provider} {g.scope} (since {utc(g.first_seen):%Y-%m-%d %H:%M} UTC)"
            for g in rows]


def _summary(row: CycleRow) -> dict[str, Any]:
    """A cycle's stored summary (CycleSummary.as_dict), or {} where it holds none."""
    summary: Any = row.summary
    return summary if isinstance(summary, dict) else {}


def last_governed(s: Session) -> int | None:
    """How many instances the last finished cycle governed (None: no cycle yet)."""
    row = s.exec(select(CycleRow).where(col(CycleRow.status) == "ok")
                 .order_by(col(CycleRow.id).desc()).limit(1)).first()
    if row is None:
        return None
    value = _summary(row).get("instances")
    if isinstance(value, dict):  # per provider
        return sum(int(n) for n in value.values())
    return int(value) if isinstance(value, int) else None


def gather_status(db: Database, now: datetime, poll_seconds: float) -> dict[str, Any]:
    """What an operator asks first: is it running, is it acting, is anything stuck?"""
    with db.session() as s:
        return status_of(s, now, poll_seconds)


def status_of(s: Session, now: datetime, poll_seconds: float) -> dict[str, Any]:
    """`gather_status` in an open session (the console reads it beside its figures)."""
    last = s.exec(select(CycleRow).order_by(col(CycleRow.id).desc()).limit(1)).first()
    last_ok = s.execute(sa_select(func.max(col(CycleRow.finished_at)))
                        .where(col(CycleRow.status) == "ok")).scalar()
    ended = {str(k): int(v) for k, v in s.execute(
        sa_select(col(CycleRow.status), func.count()).group_by(col(CycleRow.status))).all()}
    failed = ended.get("failed", 0)
    alerts = {str(k): int(v) for k, v in s.execute(
        sa_select(col(AlertRow.status), func.count()).group_by(col(AlertRow.status))).all()}
    open_intents = s.execute(sa_select(func.count()).select_from(ActionJournalRow)
                             .where(col(ActionJournalRow.status) == "intent")).scalar()
    gaps = [f"{g.provider} {g.scope}" for g in s.exec(
        select(GapRow).where(col(GapRow.resolved_at).is_(None)))]
    paused = control.is_paused(s)
    unconfirmed = count_unconfirmed(s)
    degraded = unreadable(s, now, timedelta(seconds=poll_seconds))
    governed = last_governed(s)
    proven = {str(k): int(v) for k, v in s.execute(
        sa_select(col(AgentProofRow.provider), func.count())
        .where(col(AgentProofRow.proven_at) >= now - PROVEN_RECENTLY)
        .group_by(col(AgentProofRow.provider))).all()}
    cycle: dict[str, Any] | None = None
    if last is not None:
        row = last
        dropped = _summary(row).get("readings_dropped")
        cycle = {"id": row.id, "status": row.status, "started_at": utc(row.started_at).isoformat(),
                 "finished_at": utc(row.finished_at).isoformat() if row.finished_at else None,
                 "error": row.error,
                 # per provider: cloud metric points no reading can hold, dropped (no data)
                 "readings_dropped": dropped if isinstance(dropped, dict) else {}}
    age = (now - utc(last_ok)).total_seconds() if last_ok is not None else None
    cycling = age is not None and age < 3 * poll_seconds
    return {"healthy": cycling and not degraded, "cycling": cycling,
            # written by `costguard demo`: its cycles are the demo's, no daemon follows them
            "demo": control.get(s, control.DEMO_MARK) is not None,
            "degraded": degraded, "governed_instances": governed,
            "paused": paused, "last_cycle": cycle,
            "seconds_since_last_good_cycle": round(age, 1) if age is not None else None,
            "failed_cycles": int(failed or 0), "alerts": alerts,
            # Ctrl-C'd, and found left running by a process that died (engine/cycle_rows.py)
            "interrupted_cycles": ended.get("interrupted", 0),
            "abandoned_cycles": ended.get("abandoned", 0),
            "running_cycles": ended.get("running", 0),
            "unresolved_action_intents": int(open_intents or 0), "open_gaps": gaps,
            "unconfirmed_alert_deliveries": unconfirmed,
            # agents that proved their instance within two credential lifetimes, by provider
            "proven_agents": proven}
