"""When a delivery may go out: per-recipient throttling and Slack's rate-limit pause.

At most `throttle.per_recipient` messages to one recipient per `throttle.window`; a Slack 429
pauses every Slack delivery of this dispatcher until its Retry-After has passed.
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import col, select

from costguard.alerts.settings import ThrottleSettings
from costguard.alerts.tables import AlertDeliveryRow
from costguard.clock import utc
from costguard.store.db import Database


class Throttle:
    def __init__(self, db: Database, settings: ThrottleSettings) -> None:
        self.db = db
        self.settings = settings
        self._slack_paused_until: datetime | None = None
        self._recent: dict[tuple[str, str], list[datetime]] = {}

    def wait_until(self, row: AlertDeliveryRow, now: datetime) -> datetime | None:
        """None if `row` may be sent now, else when it may."""
        if row.channel == "console":
            return None
        if (row.channel == "slack" and self._slack_paused_until is not None
                and self._slack_paused_until > now):
            return self._slack_paused_until
        window = self.settings.window
        recent = self._recent_sends(row.channel, row.target, now - window)
        if len(recent) >= self.settings.per_recipient:
            return recent[-self.settings.per_recipient] + window
        return None

    def sent(self, row: AlertDeliveryRow, at: datetime) -> None:
        self._recent.setdefault((row.channel, row.target), []).append(at)

    def pause_slack(self, until: datetime) -> None:
        self._slack_paused_until = until

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
