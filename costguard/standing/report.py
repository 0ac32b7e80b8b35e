""""Paid for, not running": the volumes, snapshots and addresses nothing running uses, by
team and kind, in dollars a month, as the last listing left them (standing/stage.py); and
the managed notebooks whose GPUs sat idle over the last day, at that day's rate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlmodel import Session, col, select

from costguard.costs.attribution import UNATTRIBUTED
from costguard.model import HOURS_PER_MONTH
from costguard.store.tables import InstanceRow, StandingRow

TITLE = "Paid for, not running"


@dataclass(frozen=True)
class StandingLine:
    team: str
    kind: str
    count: int
    size_gb: int
    usd_per_month: float
    unpriced: int  # of `count`, how many no table prices
    longest_unused_days: float
    # notebooks: the largest share of its running hours of the last day any sat idle
    idle_share: float | None = None

    @property
    def unused_for(self) -> str:
        """`up to 36 days`; a notebook's: `idle up to 58% of the last day` (of the hours
        it ran)."""
        if self.idle_share is not None:
            return f"idle up to {self.idle_share:.0%} of the last day"
        return f"up to {self.longest_unused_days:.0f} days"

    def as_json(self) -> dict[str, Any]:
        return {"team": self.team, "kind": self.kind, "count": self.count,
                "size_gb": self.size_gb, "usd_per_month": round(self.usd_per_month, 2),
                "unpriced": self.unpriced,
                "longest_unused_days": round(self.longest_unused_days, 1),
                "idle_share": None if self.idle_share is None else round(self.idle_share, 3),
                "unused_for": self.unused_for}


NOTEBOOK = "notebook"
NOTEBOOK_DAY = timedelta(days=1)  # the span a notebook's idle rate is read over


def paid_not_running(s: Session, now: datetime, team: str | None = None
                     ) -> list[StandingLine]:
    """Lines by (team, kind), most expensive first; `team` keeps that team's only. The
    team is the one attributed when the resource was last listed."""
    groups: dict[tuple[str, str], list[tuple[float | None, int, float]]] = {}
    rows = s.exec(select(StandingRow).where(col(StandingRow.gone).is_(False),
                                            col(StandingRow.in_use).is_(False)))
    for row in rows:
        if row.unused_since is None:
            continue
        who = row.team or UNATTRIBUTED
        if team is not None and who != team:
            continue
        days = max(0.0, (now - row.unused_since).total_seconds() / 86400)
        groups.setdefault((who, row.kind), []).append(
            (row.usd_per_month, row.size_gb or 0, days))
    lines = [StandingLine(team=who, kind=kind, count=len(v),
                          size_gb=sum(size for _, size, _ in v),
                          usd_per_month=sum(usd or 0.0 for usd, _, _ in v),
                          unpriced=sum(1 for usd, _, _ in v if usd is None),
                          longest_unused_days=max(days for _, _, days in v))
             for (who, kind), v in groups.items()]
    lines += idle_notebooks(s, now, team)
    return sorted(lines, key=lambda line: (-line.usd_per_month, line.team, line.kind))


def idle_notebooks(s: Session, now: datetime, team: str | None = None) -> list[StandingLine]:
    """By team, the notebooks whose GPUs sat idle in the day before `now`: their idle spend
    of that day as a month's (a notebook left open bills by the hour whether its user works
    in it or not), and the largest share of its running hours any sat idle. An unpriced
    notebook's idle hours count it, its dollars are unknown."""
    from costguard.report.queries import spend

    # the notebooks first (most fleets have none: then no spend query at all), and their
    # spend alone, not the whole fleet's regrouped by kind
    books = list(s.exec(select(InstanceRow.instance_id).where(InstanceRow.kind == NOTEBOOK)))
    if not books:
        return []
    report = spend(s, ["team", "instance"], now - NOTEBOOK_DAY, now, instance_ids=books)
    groups: dict[str, list[tuple[int, float, bool]]] = {}
    for row in report.rows:
        who = row.key[0] or UNATTRIBUTED
        if row.idle_gpu_seconds <= 0 or (team is not None and who != team):
            continue
        share = row.idle_gpu_seconds / row.gpu_seconds if row.gpu_seconds else 0.0
        groups.setdefault(who, []).append((row.idle_cost_micros, share,
                                           row.cost_micros == 0))
    per_month = HOURS_PER_MONTH / 24
    return [StandingLine(team=who, kind=NOTEBOOK, count=len(v), size_gb=0,
                         usd_per_month=sum(idle for idle, _, _ in v) / 1e6 * per_month,
                         unpriced=sum(1 for _, _, unpriced in v if unpriced),
                         longest_unused_days=0.0,
                         idle_share=max(share for _, share, _ in v))
            for who, v in groups.items()]


def to_rich(lines: Sequence[StandingLine], console: Console) -> None:
    """The section as the terminal shows it (nothing when there is nothing to show)."""
    if not lines:
        return
    table = Table(title=f"{TITLE}, by the month",
                  title_justify="left")
    for name, justify in (("team", "left"), ("kind", "left"), ("count", "right"),
                          ("GB", "right"), ("$/month", "right"), ("unused for", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for line in lines:
        table.add_row(line.team, line.kind, str(line.count),
                      f"{line.size_gb:,}" if line.size_gb else "-",
                      f"${line.usd_per_month:,.2f}" + (f" (+{line.unpriced} unpriced)"
                                                       if line.unpriced else ""),
                      line.unused_for)
    total = sum(line.usd_per_month for line in lines)
    table.add_row("total", "", str(sum(line.count for line in lines)), "",
                  f"${total:,.2f}", "", style="bold")
    console.print(table)
