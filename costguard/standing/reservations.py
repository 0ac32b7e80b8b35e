"""Capacity reservations over time: what each listing saw of a reservation's use is kept
(`reservation_use`), and a period's unused accelerator-hours and their dollars are summed
from it.

A sample stands for the time until the next one, at most `COVERS` (the listing runs about
hourly; time costguard did not see, while it was down, is never counted). Unused
instance-hours are `capacity - used` times those hours; accelerator-hours multiply them by
the accelerators of the reserved type (none for a type without any: such a reservation
still shows its instance-hours and dollars).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rich.console import Console
from sqlmodel import Session, col, select

from costguard.costs.attribution import UNATTRIBUTED
from costguard.standing.model import Reserved, Standing
from costguard.store.tables import ReservationUseRow, StandingRow

COVERS = timedelta(minutes=90)  # the longest a sample stands for (listings are ~hourly)
# how long the samples are kept (a year's reports and a month on: ~9,000 rows a reservation)
KEPT = timedelta(days=400)
TITLE = "Capacity reservations"


def record_use(s: Session, item: Standing, team: str | None, now: datetime) -> None:
    """Keep what this listing saw of reservation `item`'s use."""
    r = item.reservation
    assert r is not None
    s.merge(ReservationUseRow(provider=item.provider, resource_id=item.resource_id, at=now,
                              capacity=r.capacity, used=min(r.used, r.capacity),
                              accelerators=r.accelerators,
                              unit_usd_per_hour=r.unit_usd_per_hour, team=team))


def prune_use(s: Session, before: datetime) -> int:
    """Delete the samples taken before `before`; how many went."""
    stale = list(s.exec(select(ReservationUseRow).where(col(ReservationUseRow.at) < before)))
    for row in stale:
        s.delete(row)
    return len(stale)


@dataclass(frozen=True)
class ReservationLine:
    """One reservation over a period, and as last listed."""

    provider: str
    resource_id: str
    team: str
    zone: str
    now: Reserved  # as last listed
    unused_instance_hours: float
    unused_accelerator_hours: float
    usd: float | None  # what the unused hours cost (None: unpriced)
    name: str | None = None

    @property
    def label(self) -> str:
        """What a person calls it: its id (`cr-0abc...`), or on GCP, whose ids are numbers
        nobody types, its name."""
        return self.name if self.provider == "gcp" and self.name else self.resource_id

    def as_json(self) -> dict[str, Any]:
        r = self.now
        return {"provider": self.provider, "reservation": self.resource_id,
                "name": self.name,
                "team": self.team, "zone": self.zone, "instance_type": r.instance_type,
                "capacity": r.capacity, "used": r.used, "accelerators": r.accelerators,
                "accelerator": r.accelerator,
                "unused_instance_hours": round(self.unused_instance_hours, 2),
                "unused_accelerator_hours": round(self.unused_accelerator_hours, 2),
                "unused_usd": None if self.usd is None else round(self.usd, 2),
                "ends_at": r.ends_at.isoformat() if r.ends_at else None,
                "match": r.match, "capacity_block": r.block, "twins": list(r.twins)}


def _overlap(start: datetime, end: datetime, since: datetime, until: datetime) -> float:
    return max(0.0, (min(end, until) - max(start, since)).total_seconds() / 3600)


def unused_in(s: Session, since: datetime, until: datetime, team: str | None = None
              ) -> list[ReservationLine]:
    """Every reservation seen in [since, until), most unused dollars (then hours) first;
    `team` keeps that team's only."""
    samples: dict[tuple[str, str], list[ReservationUseRow]] = {}
    for row in s.exec(select(ReservationUseRow).where(
            col(ReservationUseRow.at) < until, col(ReservationUseRow.at) >= since - COVERS
    ).order_by(col(ReservationUseRow.provider), col(ReservationUseRow.resource_id),
               col(ReservationUseRow.at))):
        samples.setdefault((row.provider, row.resource_id), []).append(row)
    lines = []
    for (provider, rid), rows in samples.items():
        stored = s.get(StandingRow, (provider, rid))
        if stored is None or not stored.reservation:
            continue
        who = stored.team or UNATTRIBUTED
        if team is not None and who != team:
            continue
        hours = accel = 0.0
        usd: float | None = 0.0
        for here, after in zip(rows, [*rows[1:], None], strict=True):
            end = here.at + COVERS if after is None else min(after.at, here.at + COVERS)
            span = _overlap(here.at, end, since, until) * max(here.capacity - here.used, 0)
            hours += span
            accel += span * here.accelerators
            if span and usd is not None:
                usd = None if here.unit_usd_per_hour is None else \
                    usd + span * here.unit_usd_per_hour
        lines.append(ReservationLine(provider, rid, who, stored.zone or stored.region,
                                     Reserved.model_validate(stored.reservation), hours,
                                     accel, usd, stored.name))
    return sorted(lines, key=lambda x: (-(x.usd or 0.0), -x.unused_instance_hours,
                                        x.resource_id))


def span_words(hours: float) -> str:
    """`10 hours`, `7 days`: a report's window, as its heading says it."""
    return f"{hours:,.0f} hours" if hours < 48 else f"{hours / 24:,.0f} days"


def to_rich(lines: Sequence[ReservationLine], console: Console, hours: float) -> None:
    """The reservations as the terminal shows them, a few lines each (a table of their
    columns is too wide for 80): nothing when there are none."""
    if not lines:
        return
    console.print(f"[bold]{TITLE}[/bold], unused over {span_words(hours)}", highlight=False)
    for line in lines:
        r = line.now
        ends = f"ends {r.ends_at:%Y-%m-%d}" if r.ends_at else "until cancelled"
        kind = "Capacity Block" if r.block else r.match
        unused = (f"{line.unused_accelerator_hours:,.0f} accelerator-hours" if r.accelerators
                  else f"{line.unused_instance_hours:,.0f} instance-hours")
        cost = "unpriced" if line.usd is None else f"${line.usd:,.2f}"
        console.print(f"  {line.label} ({line.team}): {r.instance_type} x{r.capacity}, "
                      f"{r.used} running, {kind}", highlight=False)
        console.print(f"    unused: {unused}, {cost}; {ends}", highlight=False)
        if r.twins:
            console.print(f"    on demand beside it, could run in it: {', '.join(r.twins)}",
                          highlight=False)
