"""`costguard alerts retry`: put failed or unconfirmed deliveries back in the queue.

A requeue is a compare-and-set from `failed` / `unconfirmed` to `pending` (attempts reset,
due now), so a delivery that is `sent`, `digested` or still waiting is never touched: an
operator cannot make costguard send a confirmed message twice. Each requeue is journaled
(action `alert-retry`) with who asked and what the delivery had been. Alerts that failed
before routing (no recipient on a configured channel) go back to routing with `--failed`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import update
from sqlmodel import Session, col, select

from costguard.alerts.tables import AlertDeliveryRow
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow

RETRYABLE = ("failed", "unconfirmed")


@dataclass(frozen=True)
class Requeued:
    id: int
    to: str  # channel:target
    was: str  # failed | unconfirmed
    kind: str  # alert | digest


@dataclass
class RetryResult:
    requeued: list[Requeued] = field(default_factory=list)
    rerouted: list[tuple[int, str]] = field(default_factory=list)  # (alert id, subject)
    refused: list[tuple[int, str]] = field(default_factory=list)  # (id, why not)


def requeue(db: Database, now: datetime, who: str, *, ids: Collection[int] = (),
            failed: bool = False, unconfirmed: bool = False) -> RetryResult:
    result = RetryResult()
    statuses = [s for s, on in (("failed", failed), ("unconfirmed", unconfirmed)) if on]
    with db.session() as s:
        rows = _selected(s, ids, statuses, result)
        for row in rows:
            was = row.status
            if was not in RETRYABLE:
                result.refused.append((row.id or 0, _why_not(row)))
            elif _requeue_one(s, row, now, who):
                result.requeued.append(Requeued(row.id or 0, f"{row.channel}:{row.target}",
                                                was, row.kind))
            else:
                result.refused.append((row.id or 0, "changed meanwhile; run it again"))
        if failed:
            result.rerouted = _reroute_failed_alerts(s, now, who)
    return result


def _selected(s: Session, ids: Collection[int], statuses: list[str],
              result: RetryResult) -> list[AlertDeliveryRow]:
    """The deliveries asked for; a digest member stands for its digest."""
    picked: dict[int, AlertDeliveryRow] = {}
    for i in ids:
        row = s.get(AlertDeliveryRow, i)
        if row is None:
            result.refused.append((i, "no such delivery (costguard alerts list shows ids)"))
            continue
        if row.digest_id is not None:
            digest = s.get(AlertDeliveryRow, row.digest_id)
            row = digest if digest is not None else row
        picked[row.id or 0] = row
    if statuses:
        for row in s.exec(select(AlertDeliveryRow).where(
                col(AlertDeliveryRow.status).in_(statuses),
                col(AlertDeliveryRow.digest_id).is_(None)).order_by(col(AlertDeliveryRow.id))):
            picked.setdefault(row.id or 0, row)
    return list(picked.values())


def _why_not(row: AlertDeliveryRow) -> str:
    if row.status in ("sent", "digested"):
        return f"{row.status} (id {row.external_id}): a confirmed message is never sent twice"
    return f"{row.status}: already waiting to be sent"


def _requeue_one(s: Session, row: AlertDeliveryRow, now: datetime, who: str) -> bool:
    was, error = row.status, row.last_error
    note = f"requeued by {who} at {now:%Y-%m-%d %H:%M} UTC; was {was}: {error}"
    done = s.execute(update(AlertDeliveryRow).where(
        col(AlertDeliveryRow.id) == row.id, col(AlertDeliveryRow.status) == was,
    ).values(status="pending", attempts=0, next_attempt_at=now, claimed_at=None,
             claimed_by=None, last_error=note[:2000]))
    if getattr(done, "rowcount", 0) != 1:
        return False
    alert_ids = {row.alert_id} if row.alert_id is not None else set()
    if row.kind == "digest":  # its members wait for it again
        for member in s.exec(select(AlertDeliveryRow).where(
                AlertDeliveryRow.digest_id == row.id)):
            member.status, member.sent_at = "held", None
            s.add(member)
            if member.alert_id is not None:
                alert_ids.add(member.alert_id)
    for alert_id in alert_ids:
        alert = s.get(AlertRow, alert_id)
        if alert is not None:
            alert.status = "routed"
            s.add(alert)
    _journal(s, row, now, who, f"{who} requeued delivery {row.id} to {row.channel}:"
                               f"{row.target} (was {was}): {error or ''}")
    return True


def _reroute_failed_alerts(s: Session, now: datetime, who: str) -> list[tuple[int, str]]:
    routed = set(s.exec(select(AlertDeliveryRow.alert_id).where(
        col(AlertDeliveryRow.alert_id).is_not(None))))
    out = []
    for alert in s.exec(select(AlertRow).where(AlertRow.status == "failed")):
        if alert.id in routed:
            continue  # its deliveries are requeued one by one
        _journal(s, None, now, who, f"{who} sent alert {alert.id} back to routing: "
                                    f"{alert.last_error or ''}", alert)
        alert.status, alert.next_attempt_at = "pending", now
        alert.last_error = f"sent back to routing by {who}; was: {alert.last_error}"[:2000]
        s.add(alert)
        out.append((alert.id or 0, alert.subject))
    return out


def _journal(s: Session, row: AlertDeliveryRow | None, now: datetime, who: str, detail: str,
             alert: AlertRow | None = None) -> None:
    if alert is None and row is not None and row.alert_id is not None:
        alert = s.get(AlertRow, row.alert_id)
    ref = f"delivery {row.id}" if row is not None else f"alert {alert.id if alert else '?'}"
    s.add(ActionJournalRow(
        key=f"alert-retry|{ref}|{now.isoformat()}", cycle_id=None,
        policy=(alert.policy if alert else None) or "-",
        provider=(alert.provider if alert else None) or "-",
        instance_id=(alert.instance_id if alert else None) or "-", action="alert-retry",
        dry_run=False, status="requested", detail=detail[:2000], usd_per_hour=0.0,
        intent_at=now, result_at=now))
