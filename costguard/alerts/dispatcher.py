"""The dispatcher: outbox alerts -> per-recipient deliveries -> Slack, email, console.

One pass (`Dispatcher.run`): resolve interrupted claims (`recovery`), route pending alerts
into deliveries, assemble due digests (`digests`), then send what is due (`channels`),
each send claimed and recorded by the queue (`queue`) and paced by `throttle`.

Routing happens in one transaction: the alert turns `routed` together with its delivery
rows, whose dedupe keys (event + channel + recipient) are unique, so no event is routed
twice. What each channel guarantees after a crash is in `costguard.alerts.recovery`.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Collection
from datetime import datetime
from pathlib import Path

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from costguard.alerts.channels import Channels
from costguard.alerts.console import AlertPrinter, log_alert
from costguard.alerts.digests import build_digests
from costguard.alerts.errors import DeliveryError
from costguard.alerts.outbox import pending
from costguard.alerts.queue import DeliveryQueue, DispatchStats, settle_alert
from costguard.alerts.recovery import verdict
from costguard.alerts.routing import Router, RoutingError, Target, is_sample, load_routing
from costguard.alerts.settings import AlertsSettings
from costguard.alerts.tables import AlertDeliveryRow
from costguard.alerts.throttle import Throttle
from costguard.clock import utc
from costguard.store.db import Database
from costguard.store.tables import AlertRow

__all__ = ["DispatchStats", "Dispatcher", "delivery_key", "dispatch", "settle_alert"]

log = logging.getLogger("costguard.alerts")

FaultHook = Callable[[str], None]  # tests raise at "before-send" / "after-send"


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
        self.router = router
        self.fault = fault or (lambda point: None)
        self.owner = uuid.uuid4().hex[:16]
        secrets = settings.secrets()
        self.channels = Channels(db, settings, printer or log_alert, secrets)
        self.queue = DeliveryQueue(db, settings, self.owner, secrets)
        self.throttle = Throttle(db, settings.throttle)

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
            build_digests(self.db, self.settings.digest, now, stats)
        self._send_due(now, stats, only_alerts)
        return stats

    # -- routing ----------------------------------------------------------------------------
    def _channels(self, targets: tuple[Target, ...]) -> list[Target]:
        out: list[Target] = []
        slack, email = self.channels.slack, self.channels.email
        for t in targets:
            if t.channel == "slack" and slack is not None:
                out.append(Target("slack", "webhook") if slack.uses_webhook else t)
            elif t.channel == "email" and email is not None:
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

    # -- sending ----------------------------------------------------------------------------
    def _send_due(self, now: datetime, stats: DispatchStats,
                  only: Collection[int] | None) -> None:
        for row in self.queue.due(now, only):
            wait = self.throttle.wait_until(row, now)
            if wait is not None:
                self.queue.defer(row, wait)
                stats.deferred += 1
                continue
            if not self.queue.claim(row, now):
                continue
            self.fault("before-send")
            external: str | None = None
            error: DeliveryError | None = None
            try:
                external = self.channels.deliver(row, self._marker(row))
            except DeliveryError as exc:
                error = exc
            except Exception as exc:  # a message that cannot be built: this one, not the rest
                log.exception("alert delivery %s to %s:%s could not be made", row.id,
                              row.channel, row.target)
                error = DeliveryError(f"could not be made: {type(exc).__name__}: {exc}")
            self.fault("after-send")
            self._record(row, now, external, error, stats)

    def _marker(self, row: AlertDeliveryRow) -> Callable[[str], None] | None:
        if row.channel != "email":
            return None
        return lambda external: self.queue.mark_transaction(row, external)

    def _record(self, row: AlertDeliveryRow, now: datetime, external: str | None,
                error: DeliveryError | None, stats: DispatchStats) -> None:
        stored = self.queue.finish(row, now, external, error, stats)
        if stored.status == "sent":
            self.throttle.sent(row, now)
        elif error is not None and error.retry_after is not None and row.channel == "slack":
            self.throttle.pause_slack(stored.next_attempt_at)

    # -- recovery ---------------------------------------------------------------------------
    def _recover(self, now: datetime, stats: DispatchStats) -> None:
        for row in self.queue.interrupted(now):
            found = verdict(row, self.channels, now)
            if found is None:
                continue  # the channel cannot tell yet: ask again next pass
            if self.queue.resolve_interrupted(row, now, found.status, found.external,
                                              found.note):
                stats.recovered += 1
                log.warning("alert delivery %s to %s:%s: %s", row.id, row.channel,
                            row.target, found.note)


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
