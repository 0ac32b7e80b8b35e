""""Paid for, not running": the volumes, snapshots and addresses nothing running uses, by
team and kind, in dollars a month, as the last listing left them (standing/stage.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlmodel import Session, col, select

from costguard.costs.attribution import UNATTRIBUTED
from costguard.store.tables import StandingRow

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

    def as_json(self) -> dict[str, Any]:
        return {"team": self.team, "kind": self.kind, "count": self.count,
                "size_gb": self.size_gb, "usd_per_month": round(self.usd_per_month, 2),
                "unpriced": self.unpriced,
                "longest_unused_days": round(self.longest_unused_days, 1)}


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
    return sorted(lines, key=lambda line: (-line.usd_per_month, line.team, line.kind))


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
                      f"up to {line.longest_unused_days:.0f}d")
    total = sum(line.usd_per_month for line in lines)
    table.add_row("total", "", str(sum(line.count for line in lines)), "",
                  f"${total:,.2f}", "", style="bold")
    console.print(table)
