"""The stored efficiency verdicts (`recommend/stored.py` writes and reads them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column
from sqlmodel import Field, Session, SQLModel, col, select

from costguard.store.tables import DEFERRED
from costguard.store.types import UTCDateTime


class EfficiencyRow(SQLModel, table=True):
    """One instance's latest efficiency verdict and fit under one set of thresholds
    (`settings_key`): replaced when it is judged again."""

    model_config = DEFERRED

    __tablename__ = "efficiency_verdicts"

    provider: str = Field(primary_key=True, max_length=16)
    instance_id: str = Field(primary_key=True, max_length=128)
    settings_key: str = Field(primary_key=True, max_length=16)
    judged_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False, index=True))
    bottleneck: str = Field(max_length=24)
    underused: bool = False
    team: str = Field(default="", max_length=256)
    spend_usd: float = 0.0
    fit_to: str | None = Field(default=None, max_length=64)
    monthly_usd: float = 0.0
    reason: str = ""
    risks: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    efficiency: dict[str, Any] = Field(default_factory=dict,
                                       sa_column=Column(JSON, nullable=False))


def judged_rows(session: Session, key: str, after: datetime, until: datetime | None = None
                ) -> Sequence[EfficiencyRow]:
    """The verdicts stored under the thresholds `key` judged after `after` (and at or
    before `until`, when given)."""
    query = select(EfficiencyRow).where(EfficiencyRow.settings_key == key,
                                        col(EfficiencyRow.judged_at) > after)
    if until is not None:
        query = query.where(col(EfficiencyRow.judged_at) <= until)
    return session.exec(query).all()
