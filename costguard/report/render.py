"""Render a spend report as a rich table or stable JSON."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from costguard.report.queries import Report, ReportRow

SCHEMA_VERSION = 1


def usd(micros: int) -> str:
    return f"${micros / 1e6:,.2f}"


def _row_json(by: tuple[str, ...], r: ReportRow) -> dict[str, Any]:
    return {
        **dict(zip(by, r.key, strict=True)),
        "cost_usd": round(r.cost_micros / 1e6, 2),
        "idle_cost_usd": round(r.idle_cost_micros / 1e6, 2),
        "idle_share": round(r.idle_share, 4),
        "spot_share": round(r.spot_share, 4),
        "gpu_hours": round(r.gpu_seconds / 3600, 2),
        "idle_gpu_hours": round(r.idle_gpu_seconds / 3600, 2),
        "instances": r.instances,
    }


def to_json(report: Report) -> str:
    doc = {
        "schema": SCHEMA_VERSION,
        "by": list(report.by),
        "since": report.since.isoformat(),
        "until": report.until.isoformat(),
        "rows": [_row_json(report.by, r) for r in report.rows],
        "total": _row_json((), report.total),
    }
    return json.dumps(doc, indent=2)


def to_table(report: Report, console: Console) -> None:
    title = (f"GPU and compute spend by {', '.join(report.by)}  "
             f"{report.since:%Y-%m-%d %H:%M} → {report.until:%Y-%m-%d %H:%M} UTC")
    table = Table(title=title, title_justify="left", show_footer=True)
    for dim in report.by:
        table.add_column(dim, footer="total" if dim == report.by[0] else "")
    t = report.total
    table.add_column("cost", justify="right", footer=usd(t.cost_micros))
    table.add_column("idle cost", justify="right", footer=usd(t.idle_cost_micros))
    table.add_column("idle %", justify="right", footer=f"{t.idle_share:.0%}")
    table.add_column("GPU-h", justify="right", footer=f"{t.gpu_seconds / 3600:,.1f}")
    table.add_column("spot %", justify="right", footer=f"{t.spot_share:.0%}")
    table.add_column("instances", justify="right", footer=str(t.instances))
    for r in report.rows:
        style = "yellow" if "unattributed" in r.key else None
        table.add_row(*r.key, usd(r.cost_micros), usd(r.idle_cost_micros), f"{r.idle_share:.0%}",
                      f"{r.gpu_seconds / 3600:,.1f}", f"{r.spot_share:.0%}", str(r.instances),
                      style=style)
    console.print(table)
