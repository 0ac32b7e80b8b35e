"""Per-recipient deliveries of outbox alerts: what was sent where, when, and under which id.

An `AlertRow` (the outbox) says *what happened*; routing turns it into one `AlertDeliveryRow`
per channel and recipient. Each delivery has its own dedupe key (unique), attempts, backoff
and the id the channel gave the message (Slack `ts`, SMTP `Message-ID`).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index
from sqlmodel import Field, SQLModel

from costguard.store.tables import DEFERRED
from costguard.store.types import UTCDateTime


class AlertDeliveryRow(SQLModel, table=True):
    """One message to one recipient on one channel.

    status: pending -> sending -> sent | failed; `held` waits for a digest, `digested` was
    sent inside one (`digest_id`), `unconfirmed` was interrupted mid-send on a channel that
    cannot be asked whether the message arrived (so it is not sent again).
    """

    model_config = DEFERRED

    __tablename__ = "alert_deliveries"
    __table_args__ = (
        Index("ix_alert_deliveries_due", "status", "next_attempt_at"),
        Index("ix_alert_deliveries_recipient", "channel", "target", "sent_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    dedupe_key: str = Field(max_length=600, unique=True)
    alert_id: int | None = Field(default=None, index=True)  # None for a digest
    channel: str = Field(max_length=16)  # console | slack | email
    target: str = Field(max_length=256)  # #chan, U0123, @name, webhook, a@b.c, log
    kind: str = Field(default="alert", max_length=16)  # alert | digest
    status: str = Field(default="pending", max_length=16)
    attempts: int = 0
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    next_attempt_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    claimed_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    claimed_by: str | None = Field(default=None, max_length=64)
    sent_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    external_id: str | None = Field(default=None, max_length=256)  # Slack ts, Message-ID
    digest_id: int | None = Field(default=None, index=True)
    last_error: str | None = None
