"""The dispatcher: outbox alerts -> per-recipient deliveries -> Slack, email, console.

Guarantees, in the order a delivery lives them:
- routed in one transaction: the alert turns `routed` together with its delivery rows, whose
  dedupe keys (event + channel + recipient) are unique, so no event is routed twice;
- claimed before sending: `pending -> sending` is a compare-and-set committed before the
  network call, so two dispatchers never send the same row;
- recorded after sending: `sent` with the Slack ts or the Message-ID; a failure goes back to
  `pending` with exponential backoff (or Slack's Retry-After) until `max_attempts`;
- recovered after a crash: a claim older than `claim_timeout` was interrupted. With a Slack
  bot token the channel history says whether the message arrived (it carries the dedupe key
  in its metadata): found -> `sent`, not found -> sent again. Email and webhooks cannot be
  asked, so such a row becomes `unconfirmed` and is not repeated (never twice beats maybe
  twice); `costguard alerts list --failed` shows it.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from costguard.alerts.console import AlertPrinter, log_alert
from costguard.alerts.content import AlertView, view_of
from costguard.alerts.email import (
    EmailSender,
    alert_email,
    build_email,
    message_id,
    render_digest,
)
from costguard.alerts.errors import DeliveryError
from costguard.alerts.outbox import pending
from costguard.alerts.routing import Router, RoutingError, Target, is_sample, load_routing
from costguard.alerts.settings import AlertsSettings, redact
from costguard.alerts.slack import METADATA_EVENT, SlackSender, digest_blocks, slack_message
from costguard.alerts.tables import AlertDeliveryRow
from costguard.clock import utc
from costguard.policy.base import format_duration
from costguard.store.db import Database
from costguard.store.tables import AlertRow

log = logging.getLogger("costguard.alerts")

FaultHook = Callable[[str], None]  # tests raise at "before-send" / "after-send"
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


def delivery_key(alert_key: str, target: Target) -> str:
    key = f"{alert_key}|{target}"
    if len(key) <= 600:
        return key
    return f"{key[:500]}|{hashlib.sha256(key.encode()).hexdigest()}"


class Dispatcher:
    def __init__(
        self, db: Database, settings: AlertsSettings, *, printer: AlertPrinter | None = None,
        router: Router | None = None, fault: FaultHook | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.printer = printer or log_alert
        self.router = router
        self.fault = fault or (lambda point: None)
        self.owner = uuid.uuid4().hex[:16]
        secrets = settings.secrets()
        self._secrets = secrets
        self.slack = SlackSender(settings.slack, secrets) if settings.slack.configured else None
        self.email = EmailSender(settings.email, secrets) if settings.email else None
        self._slack_paused_until: datetime | None = None
        self._recent: dict[tuple[str, str], list[datetime]] = {}

    # -- one pass ---------------------------------------------------------------------------
    def run(self, now: datetime, *, only_alerts: Collection[int] | None = None) -> DispatchStats:
        now = utc(now)
        stats = DispatchStats()
        self._recover(now, stats)
        try:
            router = self.router or _router(self.settings)
        except RoutingError as exc:
            stats.errors.append(str(exc))
            log.error("alerts not routed: the routing file is invalid:\n%s", exc)
        else:
            self._route(router, now, stats, only_alerts)
        if only_alerts is None:
            self._build_digests(now, stats)
        self._send_due(now, stats, only_alerts)
        return stats

    # -- routing ----------------------------------------------------------------------------
    def _channels(self, targets: tuple[Target, ...]) -> list[Target]:
        out: list[Target] = []
        for t in targets:
            if t.channel == "slack" and self.slack is not None:
                out.append(Target("slack", "webhook") if self.slack.uses_webhook else t)
            elif t.channel == "email" and self.email is not None:
                out.append(t)
            else:
                log.debug("alert target %s skipped: channel %s is not configured", t, t.channel)
        return list(dict.fromkeys(out))

    def _route(self, router: Router, now: datetime, stats: DispatchStats,
               only: Collection[int] | None) -> None:
        try:
            with self.db.session() as s:
                for alert in pending(s, now):
                    if only is not None and alert.id not in only:
                        continue
                    self._route_one(s, router, alert, now, stats)
        except IntegrityError:  # another dispatcher routed the same alerts first
            log.info("alerts were routed concurrently by another dispatcher; skipping")

    def _route_one(self, s: Session, router: Router, alert: AlertRow, now: datetime,
                   stats: DispatchStats) -> None:
        resolution = router.resolve(alert)
        targets = self._channels(resolution.targets)
        if self.settings.console and not is_sample(alert):
            targets.insert(0, Target("console", "log"))
        if not targets:
            alert.status, alert.last_error = "failed", (
                "no recipient on a configured channel: configure alerts.slack or alerts.email "
                "and a `fallback` in the routing file")
            s.add(alert)
            stats.failed += 1
            return
        for t in targets:
            held = resolution.digest and t.channel != "console"
            s.add(AlertDeliveryRow(
                dedupe_key=delivery_key(alert.dedupe_key, t), alert_id=alert.id,
                channel=t.channel, target=t.address, status="held" if held else "pending",
                created_at=now, next_attempt_at=now))
            stats.held += held
        alert.status = "routed"
        s.add(alert)
        s.flush()
        stats.routed += 1

    # -- digests ----------------------------------------------------------------------------
    def _build_digests(self, now: datetime, stats: DispatchStats) -> None:
        cut = now.replace(hour=self.settings.digest.hour_utc, minute=0, second=0,
                          microsecond=0)
        if now < cut:
            return
        with self.db.session() as s:
            held = list(s.exec(select(AlertDeliveryRow).where(
                AlertDeliveryRow.status == "held", col(AlertDeliveryRow.digest_id).is_(None),
                col(AlertDeliveryRow.created_at) < cut).order_by(col(AlertDeliveryRow.id))))
            groups: dict[tuple[str, str], list[AlertDeliveryRow]] = {}
            for row in held:
                groups.setdefault((row.channel, row.target), []).append(row)
            for (channel, target), rows in groups.items():
                key = f"digest|{channel}:{target}|{cut:%Y-%m-%d}"
                if s.exec(select(AlertDeliveryRow.id).where(
                        AlertDeliveryRow.dedupe_key == key)).first() is not None:
                    continue  # today's digest is out; these wait for tomorrow's
                digest = AlertDeliveryRow(dedupe_key=key, alert_id=None, channel=channel,
                                          target=target, kind="digest", status="pending",
                                          created_at=now, next_attempt_at=now)
                s.add(digest)
                s.flush()
                for row in rows:
                    row.digest_id = digest.id
                    s.add(row)
                stats.digests += 1

    # -- sending ----------------------------------------------------------------------------
    def _send_due(self, now: datetime, stats: DispatchStats,
                  only: Collection[int] | None) -> None:
        with self.db.session() as s:
            stmt = (select(AlertDeliveryRow)
                    .where(AlertDeliveryRow.status == "pending",
                           col(AlertDeliveryRow.next_attempt_at) <= now)
                    .order_by(col(AlertDeliveryRow.id)).limit(1000))
            if only is not None:
                stmt = stmt.where(col(AlertDeliveryRow.alert_id).in_(list(only)))
            due = list(s.exec(stmt))
        for row in due:
            wait = self._must_wait(row, now)
            if wait is not None:
                self._defer(row, wait)
                stats.deferred += 1
                continue
            if not self._claim(row, now):
                continue
            self.fault("before-send")
            external: str | None = None
            error: DeliveryError | None = None
            try:
                external = self._deliver(row)
            except DeliveryError as exc:
                error = exc
            self.fault("after-send")
            self._finish(row, now, external, error, stats)

    def _must_wait(self, row: AlertDeliveryRow, now: datetime) -> datetime | None:
        if row.channel == "console":
            return None
        if (row.channel == "slack" and self._slack_paused_until is not None
                and self._slack_paused_until > now):
            return self._slack_paused_until
        window = self.settings.throttle.window
        recent = self._recent_sends(row.channel, row.target, now - window)
        if len(recent) >= self.settings.throttle.per_recipient:
            return recent[-self.settings.throttle.per_recipient] + window
        return None

    def _recent_sends(self, channel: str, target: str, since: datetime) -> list[datetime]:
        ref = (channel, target)
        if ref not in self._recent:
            with self.db.session() as s:
                self._recent[ref] = sorted(utc(t) for t in s.exec(
                    select(AlertDeliveryRow.sent_at).where(
                        AlertDeliveryRow.channel == channel, AlertDeliveryRow.target == target,
                        AlertDeliveryRow.status == "sent",
                        col(AlertDeliveryRow.sent_at) > since)) if t is not None)
        self._recent[ref] = [t for t in self._recent[ref] if t > since]
        return self._recent[ref]

    def _defer(self, row: AlertDeliveryRow, until: datetime) -> None:
        with self.db.session() as s:
            s.execute(update(AlertDeliveryRow).where(
                col(AlertDeliveryRow.id) == row.id).values(next_attempt_at=until))

    def _claim(self, row: AlertDeliveryRow, now: datetime) -> bool:
        with self.db.session() as s:
            result = s.execute(update(AlertDeliveryRow).where(
                col(AlertDeliveryRow.id) == row.id, col(AlertDeliveryRow.status) == "pending",
            ).values(status="sending", claimed_at=now, claimed_by=self.owner,
                     attempts=AlertDeliveryRow.attempts + 1))
            return bool(getattr(result, "rowcount", 0) == 1)

    def _deliver(self, row: AlertDeliveryRow) -> str:
        views, alert = self._content(row)
        max_snooze = format_duration(self.settings.max_snooze)
        if row.kind == "digest":
            title = (f"costguard daily digest: {len(views)} alert"
                     f"{'s' if len(views) != 1 else ''} for {row.target}")
            if row.channel == "console":
                self.printer("digest", title, "\n".join(v.subject for v in views))
                return "console"
            if row.channel == "slack":
                return self._slack().send(row.target, {
                    "text": title, "blocks": digest_blocks(title, views),
                    "metadata": {"event_type": METADATA_EVENT,
                                 "event_payload": {"dedupe_key": row.dedupe_key}}})
            text, html = render_digest(title, views)
            return self._email().send(build_email(
                subject=f"[costguard] {title}", text=text, html=html, to=row.target,
                from_addr=self._email().settings.from_addr, dedupe_key=row.dedupe_key))
        assert alert is not None
        view = views[0]
        if row.channel == "console":
            self.printer(alert.kind, alert.subject, alert.body)
            return "console"
        if row.channel == "slack":
            return self._slack().send(row.target, slack_message(view, row.dedupe_key))
        sender = self._email()
        return sender.send(alert_email(view, to=row.target,
                                       from_addr=sender.settings.from_addr,
                                       dedupe_key=row.dedupe_key, max_snooze=max_snooze))

    def _slack(self) -> SlackSender:
        if self.slack is None:
            raise DeliveryError("Slack is not configured (alerts.slack)", permanent=True)
        return self.slack

    def _email(self) -> EmailSender:
        if self.email is None:
            raise DeliveryError("email is not configured (alerts.email)", permanent=True)
        return self.email

    def _content(self, row: AlertDeliveryRow) -> tuple[list[AlertView], AlertRow | None]:
        with self.db.session() as s:
            if row.kind == "digest":
                members = s.exec(select(AlertRow).join(
                    AlertDeliveryRow, col(AlertDeliveryRow.alert_id) == col(AlertRow.id)).where(
                    AlertDeliveryRow.digest_id == row.id).order_by(col(AlertRow.id)))
                return [view_of(a, self.settings.max_snooze) for a in members], None
            alert = s.get(AlertRow, row.alert_id)
            if alert is None:
                raise DeliveryError(f"alert {row.alert_id} no longer exists", permanent=True)
            return [view_of(alert, self.settings.max_snooze)], alert

    def _finish(self, row: AlertDeliveryRow, now: datetime, external: str | None,
                error: DeliveryError | None, stats: DispatchStats) -> None:
        with self.db.session() as s:
            current = s.get(AlertDeliveryRow, row.id)
            assert current is not None
            if error is None:
                current.status, current.sent_at, current.external_id = "sent", now, external
                current.last_error = None
                stats.sent += 1
                self._recent.setdefault((row.channel, row.target), []).append(now)
            else:
                self._failed_attempt(current, error, now, stats)
            s.add(current)
            self._settle_delivery(s, current, now)

    def _failed_attempt(self, row: AlertDeliveryRow, error: DeliveryError, now: datetime,
                        stats: DispatchStats) -> None:
        row.last_error = redact(str(error), self._secrets)[:2000]
        if error.retry_after is not None:
            # the receiver is busy, not broken: this try does not count
            until = now + timedelta(seconds=error.retry_after)
            row.status, row.next_attempt_at = "pending", until
            row.attempts = max(row.attempts - 1, 0)
            if row.channel == "slack":
                self._slack_paused_until = until
            stats.deferred += 1
        elif error.permanent or row.attempts >= self.settings.max_attempts:
            row.status = "failed"
            stats.failed += 1
            log.warning("alert delivery to %s:%s failed for good after %d attempt(s): %s",
                        row.channel, row.target, row.attempts, row.last_error)
        else:
            row.status, row.next_attempt_at = "pending", now + self._backoff(row.attempts)
            stats.retrying += 1
            log.info("alert delivery to %s:%s failed (attempt %d), retrying at %s: %s",
                     row.channel, row.target, row.attempts, row.next_attempt_at.isoformat(),
                     row.last_error)

    def _backoff(self, attempts: int) -> timedelta:
        b = self.settings.backoff
        delay: timedelta = b.initial * (2 ** max(attempts - 1, 0))
        return min(delay, b.max)

    def _settle_delivery(self, s: Session, row: AlertDeliveryRow, now: datetime) -> None:
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

    # -- recovery ---------------------------------------------------------------------------
    def _recover(self, now: datetime, stats: DispatchStats) -> None:
        stale = now - self.settings.claim_timeout
        with self.db.session() as s:
            rows = list(s.exec(select(AlertDeliveryRow).where(
                AlertDeliveryRow.status == "sending",
                col(AlertDeliveryRow.claimed_at) <= stale)))
        for row in rows:
            self._recover_one(row, now, stats)

    def _recover_one(self, row: AlertDeliveryRow, now: datetime, stats: DispatchStats) -> None:
        status, external, note = "pending", None, "interrupted before it was recorded; resent"
        if row.channel == "slack" and self.slack is not None and not self.slack.uses_webhook:
            try:
                ts = self.slack.find_sent(row.target, row.dedupe_key, utc(row.claimed_at or now))
            except DeliveryError as exc:
                log.warning("cannot yet tell whether an interrupted Slack message to %s "
                            "arrived: %s", row.target, exc)
                return
            if ts is not None:
                status, external, note = "sent", ts, "interrupted; found in channel history"
        elif row.channel in ("slack", "email"):
            status, note = "unconfirmed", (
                "interrupted while sending; not repeated so it cannot arrive twice "
                "(this channel cannot be asked whether it arrived)")
            if row.channel == "email" and self.email is not None:
                external = message_id(row.dedupe_key, self.email.settings.from_addr)
        with self.db.session() as s:
            current = s.get(AlertDeliveryRow, row.id)
            if current is None or current.status != "sending":
                return
            current.status, current.last_error = status, note
            if status == "pending":
                current.next_attempt_at = now
            else:
                current.sent_at, current.external_id = now, external
            s.add(current)
            self._settle_delivery(s, current, now)
        stats.recovered += 1
        log.warning("alert delivery %s to %s:%s: %s", row.id, row.channel, row.target, note)


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


_routing_cache: dict[tuple[Path, int], Router] = {}


def _router(settings: AlertsSettings) -> Router:
    """The router for the configured routing file, re-read when the file changes."""
    default = settings.slack.default_channel
    path = settings.routing_file
    if path is None:
        return Router(None, default)
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        mtime = -1
    cached = _routing_cache.get((path, mtime))
    if cached is None or cached.default_channel != default:
        cached = Router(load_routing(path), default)
        _routing_cache.clear()
        _routing_cache[(path, mtime)] = cached
    return cached


def dispatch(db: Database, settings: AlertsSettings, now: datetime, *,
             printer: AlertPrinter | None = None) -> DispatchStats:
    """Route every pending alert and send every due delivery (the engine's alert stage)."""
    return Dispatcher(db, settings, printer=printer).run(now)
