"""Interrupted sends: a claim whose dispatcher died between sending and recording.

Each channel is asked what it can tell: with a Slack bot token the channel history says
whether the message arrived (it carries the dedupe key in its metadata). Email and webhooks
cannot be asked, so such a row becomes `unconfirmed` and is not repeated.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from costguard.alerts.channels import Channels
from costguard.alerts.email import message_id
from costguard.alerts.errors import DeliveryError
from costguard.alerts.tables import AlertDeliveryRow
from costguard.clock import utc

log = logging.getLogger("costguard.alerts")


@dataclass(frozen=True)
class Verdict:
    status: str  # sent | pending (send again now) | unconfirmed
    external: str | None
    note: str


def verdict(row: AlertDeliveryRow, channels: Channels, now: datetime) -> Verdict | None:
    """What became of an interrupted delivery; None when the channel cannot tell yet."""
    bot = channels.slack_bot
    if row.channel == "slack" and bot is not None:
        try:
            ts = bot.find_sent(row.target, row.dedupe_key, utc(row.claimed_at or now))
        except DeliveryError as exc:
            log.warning("cannot yet tell whether an interrupted Slack message to %s "
                        "arrived: %s", row.target, exc)
            return None
        if ts is not None:
            return Verdict("sent", ts, "interrupted; found in channel history")
        return Verdict("pending", None, "interrupted before it was recorded; resent")
    if row.channel in ("slack", "email"):
        external = (message_id(row.dedupe_key, channels.email.settings.from_addr)
                    if row.channel == "email" and channels.email is not None else None)
        return Verdict("unconfirmed", external, (
            "interrupted while sending; not repeated so it cannot arrive twice "
            "(this channel cannot be asked whether it arrived)"))
    return Verdict("pending", None, "interrupted before it was recorded; resent")
