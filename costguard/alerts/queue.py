"""The delivery queue in the store: claim, record, retry with backoff, settle.

A delivery (`AlertDeliveryRow`) lives these states, each change a committed transaction:

- `pending`: due at `next_attempt_at`;
- `sending`: claimed by one dispatcher (compare-and-set from `pending`, committed before the
  network call, so two dispatchers never send the same row);
- `sent` (with the Slack ts or the Message-ID), or back to `pending` with exponential backoff
  (or Slack's Retry-After, which does not count as an attempt), or `failed` after
  `max_attempts` or a permanent error;
- a claim older than `claim_timeout` was interrupted: `costguard.alerts.recovery` decides.

Nothing here talks to a channel; `costguard.alerts.channels` does the sending.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, inspect, update
from sqlmodel import Session, col, select

from costguard.alerts.errors import DeliveryError
from costguard.alerts.settings import AlertsSettings, BackoffSettings, redact
from costguard.alerts.tables import AlertDeliveryRow
from costguard.clock import utc
from costguard.store.db import Database
from costguard.store.tables import AlertRow

log = logging.getLogger("costguard.alerts")

DONE = ("sent", "digested", "unconfirmed")
WAITING = ("pending", "sending", "held")


@dataclass
class DispatchStats:
    routed: int = 0  # alerts turned into deliveries
    sent: int = 0  # messages delivered (a digest counts once)
    retrying: int = 0  # failed attempts that will be retried
    failed: int = 0  # deliveries given up on
    deferred: int = 0  # rate-limited or throttled, sent later
    held: int = 0  # waiting for the daily digest
    digests: int = 0  # digests assembled
    recovered: int = 0  # interrupted sends resolved
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def backoff_delay(backoff: BackoffSettings, attempts: int) -> timedelta:
    """`initial`, doubled per failed attempt after the first, at most `max`."""
    delay: timedelta = backoff.initial * (2 ** max(attempts - 1, 0))
    return min(delay, backoff.max)


class DeliveryQueue:
    """The store side of delivery, for one dispatcher (`owner` marks its claims)."""

    def __init__(self, db: Database, settings: AlertsSettings, owner: str,
                 secrets: Collection[str] = ()) -> None:
        self.db = db
        self.settings = settings
        self.owner = owner
        self._secrets = list(secrets)

    def due(self, now: datetime, only_alerts: Collection[int] | None = None
            ) -> list[AlertDeliveryRow]:
        with self.db.session() as s:
            stmt = (select(AlertDeliveryRow)
                    .where(AlertDeliveryRow.status == "pending",
                           col(AlertDeliveryRow.next_attempt_at) <= now)
                    .order_by(col(AlertDeliveryRow.id)).limit(1000))
            if only_alerts is not None:
                stmt = stmt.where(col(AlertDeliveryRow.alert_id).in_(list(only_alerts)))
            return list(s.exec(stmt))

    def defer(self, row: AlertDeliveryRow, until: datetime) -> None:
        with self.db.session() as s:
            s.execute(update(AlertDeliveryRow).where(
                col(AlertDeliveryRow.id) == row.id).values(next_attempt_at=until))

    def claim(self, row: AlertDeliveryRow, now: datetime) -> bool:
        """`pending -> sending`, committed; False when another dispatcher got there first."""
        with self.db.session() as s:
            result = s.execute(update(AlertDeliveryRow).where(
                col(AlertDeliveryRow.id) == row.id, col(AlertDeliveryRow.status) == "pending",
            ).values(status="sending", claimed_at=now, claimed_by=self.owner, external_id=None,
                     attempts=AlertDeliveryRow.attempts + 1))
            claimed = bool(getattr(result, "rowcount", 0) == 1)
        if claimed:
            row.status, row.claimed_at, row.claimed_by = "sending", now, self.owner
            row.attempts, row.external_id = row.attempts + 1, None
        return claimed

    def mark_transaction(self, row: AlertDeliveryRow, external: str) -> None:
        """Note, while still `sending`, that the message may now arrive (SMTP: the session
        is up and the message transaction starts): recovery then knows an interrupted send
        got that far. Before this mark, an interrupted send cannot have arrived."""
        with self.db.session() as s:
            s.execute(update(AlertDeliveryRow).where(
                col(AlertDeliveryRow.id) == row.id, col(AlertDeliveryRow.status) == "sending",
                col(AlertDeliveryRow.claimed_by) == self.owner).values(external_id=external))

    def finish(self, row: AlertDeliveryRow, now: datetime, external: str | None,
               error: DeliveryError | None, stats: DispatchStats) -> AlertDeliveryRow:
        """Record the attempt's outcome; returns the row as stored."""
        with self.db.session() as s:
            current = s.get(AlertDeliveryRow, row.id)
            assert current is not None
            if error is None:
                current.status, current.sent_at, current.external_id = "sent", now, external
                current.last_error = None
                stats.sent += 1
            else:
                self._failed_attempt(current, error, now, stats)
            s.add(current)
            settle_delivery(s, current, now)
            s.flush()
            s.expunge(current)
            return current

    def _failed_attempt(self, row: AlertDeliveryRow, error: DeliveryError, now: datetime,
                        stats: DispatchStats) -> None:
        row.last_error = redact(str(error), self._secrets)[:2000]
        if error.retry_after is not None:
            # the receiver is busy, not broken: this try does not count
            row.status = "pending"
            row.next_attempt_at = now + timedelta(seconds=error.retry_after)
            row.attempts = max(row.attempts - 1, 0)
            stats.deferred += 1
        elif error.permanent or row.attempts >= self.settings.max_attempts:
            row.status = "failed"
            stats.failed += 1
            log.warning("alert delivery to %s:%s failed for good after %d attempt(s): %s",
                        row.channel, row.target, row.attempts, row.last_error)
        else:
            row.status = "pending"
            row.next_attempt_at = now + backoff_delay(self.settings.backoff, row.attempts)
            stats.retrying += 1
            log.info("alert delivery to %s:%s failed (attempt %d), retrying at %s: %s",
                     row.channel, row.target, row.attempts, row.next_attempt_at.isoformat(),
                     row.last_error)

    # -- interrupted claims -----------------------------------------------------------------
    def interrupted(self, now: datetime) -> list[AlertDeliveryRow]:
        """Claims older than `claim_timeout`: their dispatcher died mid-send."""
        stale = now - self.settings.claim_timeout
        with self.db.session() as s:
            return list(s.exec(select(AlertDeliveryRow).where(
                AlertDeliveryRow.status == "sending",
                col(AlertDeliveryRow.claimed_at) <= stale).order_by(col(AlertDeliveryRow.id))))

    def resolve_interrupted(self, row: AlertDeliveryRow, now: datetime, status: str,
                            external: str | None, note: str) -> bool:
        """Settle an interrupted claim as `sent`, `unconfirmed` or `pending` (send again
        now); False if it was settled meanwhile."""
        with self.db.session() as s:
            current = s.get(AlertDeliveryRow, row.id)
            if current is None or current.status != "sending" or (
                    utc(current.claimed_at) if current.claimed_at else None) != (
                    utc(row.claimed_at) if row.claimed_at else None):
                return False
            current.status, current.last_error = status, note
            if status == "pending":
                current.next_attempt_at = now
            else:
                current.sent_at, current.external_id = now, external
            s.add(current)
            settle_delivery(s, current, now)
        return True


def settle_delivery(s: Session, row: AlertDeliveryRow, now: datetime) -> None:
    """Carry a finished delivery over to its digest members and its alert."""
    alert_ids = {row.alert_id} if row.alert_id is not None else set()
    if row.kind == "digest" and row.status in ("sent", "unconfirmed", "failed"):
        for member in s.exec(select(AlertDeliveryRow).where(
                AlertDeliveryRow.digest_id == row.id)):
            member.status = "failed" if row.status == "failed" else "digested"
            member.sent_at, member.external_id = now, row.external_id
            member.last_error = row.last_error
            s.add(member)
            if member.alert_id is not None:
                alert_ids.add(member.alert_id)
    s.flush()
    for alert_id in alert_ids:
        settle_alert(s, alert_id, now)


def settle_alert(s: Session, alert_id: int, now: datetime) -> None:
    """The outbox row follows its deliveries: sent when all are done, failed when one failed
    and none is still waiting."""
    alert = s.get(AlertRow, alert_id)
    if alert is None:
        return
    rows = list(s.exec(select(AlertDeliveryRow).where(AlertDeliveryRow.alert_id == alert_id)))
    statuses = {r.status for r in rows}
    alert.attempts = max((r.attempts for r in rows), default=alert.attempts)
    if statuses and statuses <= set(DONE):
        alert.status, alert.sent_at, alert.last_error = "sent", now, None
    elif statuses and not statuses & set(WAITING):
        failed = [r for r in rows if r.status == "failed"]
        alert.status = "failed"
        alert.last_error = "; ".join(f"{r.channel}:{r.target}: {r.last_error}" for r in failed)
    s.add(alert)


def count_unconfirmed(session: Session) -> int:
    """Deliveries interrupted mid-send on a channel that cannot be asked whether they
    arrived (`costguard status` shows the count; 0 on a store without the table yet)."""
    if not inspect(session.connection()).has_table(AlertDeliveryRow.__tablename__):
        return 0
    return int(session.execute(select(func.count()).select_from(AlertDeliveryRow).where(
        col(AlertDeliveryRow.status) == "unconfirmed")).scalar() or 0)
