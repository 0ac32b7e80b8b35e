"""Interrupted sends: a claim whose dispatcher died between sending and recording.

What each channel allows (see docs/alerts.md, "Guarantees"):

- **Slack, bot token**: every message carries its dedupe key in Slack message metadata, so
  the channel history since the claim says whether it arrived: found -> `sent` with its
  `ts`; not found -> sent again. Exactly once, as long as the history can be read (a rate
  limit or outage is asked again next pass; a missing scope makes it `unconfirmed`).
- **Email**: the Message-ID is derived from the dedupe key. A send interrupted before the
  SMTP session was up cannot have arrived -> sent again. One interrupted after the message
  transaction began may have -> sent again with the same Message-ID (clients that know the
  id collapse the copy), or `unconfirmed` with `email.resend_interrupted: false`.
- **Slack, incoming webhook**: cannot be asked -> `unconfirmed`, never repeated by itself;
  an operator checks the channel and runs `costguard alerts retry ID` if it is missing.
- **Console**: a log line; printed again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from costguard.alerts.channels import Channels
from costguard.alerts.errors import DeliveryError
from costguard.alerts.tables import AlertDeliveryRow
from costguard.clock import utc

log = logging.getLogger("costguard.alerts")

UNCONFIRMED = ("interrupted while sending; not repeated so it cannot arrive twice: check the "
               "destination and run `costguard alerts retry {id}` if it is missing ({why})")


@dataclass(frozen=True)
class Verdict:
    status: str  # sent | pending (send again now) | unconfirmed
    external: str | None
    note: str


def verdict(row: AlertDeliveryRow, channels: Channels, now: datetime) -> Verdict | None:
    """What became of an interrupted delivery; None when the channel cannot tell yet."""
    if row.channel == "slack":
        return _slack(row, channels, now)
    if row.channel == "email":
        return _email(row, channels)
    return Verdict("pending", None, "interrupted before it was recorded; sent again")


def _unconfirmed(row: AlertDeliveryRow, why: str, external: str | None = None) -> Verdict:
    return Verdict("unconfirmed", external, UNCONFIRMED.format(id=row.id, why=why))


def _slack(row: AlertDeliveryRow, channels: Channels, now: datetime) -> Verdict | None:
    slack = channels.slack
    if slack is None or not slack.can_look_up(row.target):
        return _unconfirmed(row, "an incoming webhook or an @name cannot be asked what it "
                                 "received")
    try:
        ts = slack.find_sent(row.target, row.dedupe_key, utc(row.claimed_at or now))
    except DeliveryError as exc:
        if exc.permanent:
            return _unconfirmed(row, f"the channel history cannot be read: {exc}")
        log.warning("cannot yet tell whether an interrupted Slack message to %s "
                    "arrived: %s", row.target, exc)
        return None
    if ts is not None:
        return Verdict("sent", ts, "interrupted after posting; found in the channel history")
    return Verdict("pending", None, "interrupted; not in the channel history, so sent again")


def _email(row: AlertDeliveryRow, channels: Channels) -> Verdict:
    if row.external_id is None:
        return Verdict("pending", None, "interrupted before the SMTP session was up, so it "
                                        "cannot have arrived; sent again")
    email = channels.email
    if email is not None and email.settings.resend_interrupted:
        return Verdict("pending", None, f"interrupted during the SMTP transaction; sent again "
                                        f"with the same Message-ID {row.external_id}")
    return _unconfirmed(row, "the mail server cannot be asked what it received",
                        row.external_id)
