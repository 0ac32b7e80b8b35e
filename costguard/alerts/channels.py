"""Per-channel sending: a delivery's content rendered for, and handed to, its channel.

Console, Slack (bot token or webhook) and email each get the same `AlertView`; a digest
bundles the views of its members. Raises `DeliveryError` when a channel cannot take the
message; the queue decides what that means (retry, wait, give up).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlmodel import col, select

from costguard.alerts.console import AlertPrinter
from costguard.alerts.errors import DeliveryError
from costguard.alerts.settings import AlertsSettings
from costguard.alerts.tables import AlertDeliveryRow
from costguard.clock import utc
from costguard.policy.base import format_duration
from costguard.store.db import Database
from costguard.store.tables import AlertRow

# Slack, email and the content they render (and smtplib) are imported where a delivery is
# made or a sender configured: most cycles deliver nothing, or only to the console
if TYPE_CHECKING:
    from costguard.alerts.content import AlertView
    from costguard.alerts.email import EmailSender
    from costguard.alerts.slack import SlackSender

log = logging.getLogger("costguard.alerts")

# called once the SMTP session is up, just before the message transaction, with the
# Message-ID: from then on the message may have arrived
OnTransaction = Callable[[str], None]


class Channels:
    def __init__(self, db: Database, settings: AlertsSettings, printer: AlertPrinter,
                 secrets: Sequence[str] = ()) -> None:
        self.db = db
        self.settings = settings
        self.printer = printer
        self.slack: SlackSender | None = None
        self.email: EmailSender | None = None
        if settings.slack.configured:
            from costguard.alerts.slack import SlackSender

            self.slack = SlackSender(settings.slack, secrets)
        if settings.email:
            from costguard.alerts.email import EmailSender

            self.email = EmailSender(settings.email, secrets)

    @property
    def slack_bot(self) -> SlackSender | None:
        """The Slack sender when it posts with a bot token (whose history can be read)."""
        return self.slack if self.slack is not None and not self.slack.uses_webhook else None

    def deliver(self, row: AlertDeliveryRow,
                on_transaction: OnTransaction | None = None) -> str:
        """Send one delivery; returns the id the channel gave it (Slack ts, Message-ID)."""
        views, alert = self.content(row)
        if row.kind == "digest":
            return self._deliver_digest(row, views, on_transaction)
        assert alert is not None
        view = views[0]
        if row.channel == "console":
            self.printer(alert.kind, alert.subject, alert.body)
            return "console"
        if row.channel == "slack":
            from costguard.alerts.slack import slack_message

            return self._post_once(row, slack_message(view, row.dedupe_key))
        from costguard.alerts.email import alert_email

        sender = self._email()
        return sender.send(alert_email(view, to=row.target,
                                       from_addr=sender.settings.from_addr,
                                       dedupe_key=row.dedupe_key,
                                       max_snooze=format_duration(self.settings.max_snooze)),
                           on_transaction=on_transaction)

    def _deliver_digest(self, row: AlertDeliveryRow, views: list[AlertView],
                        on_transaction: OnTransaction | None) -> str:
        title = (f"costguard daily digest: {len(views)} alert"
                 f"{'s' if len(views) != 1 else ''} for {row.target}")
        if row.channel == "console":
            self.printer("digest", title, "\n".join(v.subject for v in views))
            return "console"
        if row.channel == "slack":
            from costguard.alerts.slack import METADATA_EVENT, digest_blocks

            return self._post_once(row, {
                "text": title, "blocks": digest_blocks(title, views),
                "metadata": {"event_type": METADATA_EVENT,
                             "event_payload": {"dedupe_key": row.dedupe_key}}})
        from costguard.alerts.email import build_email, render_digest

        text, html = render_digest(title, views)
        sender = self._email()
        return sender.send(build_email(
            subject=f"[costguard] {title}", text=text, html=html, to=row.target,
            from_addr=sender.settings.from_addr, dedupe_key=row.dedupe_key),
            on_transaction=on_transaction)

    def _post_once(self, row: AlertDeliveryRow, message: dict[str, Any]) -> str:
        """Post, unless an earlier attempt that reported an error (a timeout, a 5xx) did
        arrive after all: with a bot token, a retry reads the history first."""
        slack = self._slack()
        if row.attempts > 1 and slack.can_look_up(row.target):
            ts = slack.find_sent(row.target, row.dedupe_key, utc(row.created_at))
            if ts is not None:
                log.info("alert delivery %s to slack:%s: an earlier attempt arrived (ts %s); "
                         "not posted again", row.id, row.target, ts)
                return ts
        return slack.send(row.target, message)

    def _slack(self) -> SlackSender:
        if self.slack is None:
            raise DeliveryError("Slack is not configured (alerts.slack)", permanent=True)
        return self.slack

    def _email(self) -> EmailSender:
        if self.email is None:
            raise DeliveryError("email is not configured (alerts.email)", permanent=True)
        return self.email

    def content(self, row: AlertDeliveryRow) -> tuple[list[AlertView], AlertRow | None]:
        from costguard.alerts.content import view_of

        max_snooze: timedelta = self.settings.max_snooze
        with self.db.session() as s:
            if row.kind == "digest":
                members = s.exec(select(AlertRow).join(
                    AlertDeliveryRow, col(AlertDeliveryRow.alert_id) == col(AlertRow.id)).where(
                    AlertDeliveryRow.digest_id == row.id).order_by(col(AlertRow.id)))
                return [view_of(a, max_snooze) for a in members], None
            alert = s.get(AlertRow, row.alert_id)
            if alert is None:
                raise DeliveryError(f"alert {row.alert_id} no longer exists", permanent=True)
            return [view_of(alert, max_snooze)], alert
