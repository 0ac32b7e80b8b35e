"""The console channel: alerts printed to the daemon's log (the demo's default channel)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from costguard.alerts.outbox import pending
from costguard.store.db import Database

log = logging.getLogger("costguard.alerts")

AlertPrinter = Callable[[str, str, str], None]  # (kind, subject, body)


def log_alert(kind: str, subject: str, body: str) -> None:
    log.info("[%s] %s", kind, subject)


def dispatch_console(db: Database, now: datetime, printer: AlertPrinter | None = None) -> int:
    """Deliver every pending alert to the console only; returns how many were delivered.

    Superseded by `costguard.alerts.dispatcher.dispatch`, where the console is one channel.
    """
    show = printer or log_alert
    sent = 0
    with db.session() as session:
        for alert in pending(session, now):
            show(alert.kind, alert.subject, alert.body)
            alert.status, alert.sent_at, alert.attempts = "sent", now, alert.attempts + 1
            session.add(alert)
            sent += 1
    return sent
