"""The HTML report: one self-contained file (inline CSS and SVG, no script, no CDN)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache

from jinja2 import Environment, PackageLoader, Template, select_autoescape
from sqlmodel import Session

from costguard.accelerators import kind_of
from costguard.costs.attribution import UNATTRIBUTED
from costguard.costs.rollup import day_floor
from costguard.report import charts
from costguard.report.figures import Report
from costguard.report.queries import daily_series, top_idle
from costguard.report.render import (
    SCHEMA_VERSION,
    _cells,
    _headers,
    display_rows,
    not_compared_cents,
    usd,
    usd_float,
    usd_micros,
)
from costguard.standing.report import StandingLine
from costguard.standing.reservations import ReservationLine


@cache
def _template() -> Template:
    env = Environment(loader=PackageLoader("costguard.report", "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    return env.get_template("report.html.j2")


def to_html(report: Report, session: Session, now: datetime,
            standing: Sequence[StandingLine] = (),
            reserved: Sequence[ReservationLine] = ()) -> str:
    rows, total = display_rows(report)
    billed = report.compare == "billed"
    series_dim = report.by[0] if report.by else "team"
    series = daily_series(session, series_dim, report.since, report.until, report.filters)
    days: list[datetime] = []
    day = day_floor(report.since)
    while day < report.until:
        days.append(day)
        day += timedelta(days=1)
    costs = {name: {d: c for d, (c, _) in per_day.items()} for name, per_day in series.items()}
    idle_rows = [(" / ".join(r.key), r.cost_micros, r.idle_cost_micros) for r in report.rows]
    top = top_idle(session, report.since, report.until, report.filters)
    unattributed = sum(r.cost for r in rows if UNATTRIBUTED in r.key)
    return _template().render(
        by_label=", ".join(report.by) or "everything",
        period=f"{report.since:%Y-%m-%d %H:%M} → {report.until:%Y-%m-%d %H:%M} UTC",
        filters=", ".join(f"{k}={v}" for k, v in report.filters.items()),
        generated=f"{now:%Y-%m-%d %H:%M} UTC",
        series_dim=series_dim,
        total={
            "cost": usd(total.cost), "idle": usd(total.idle),
            "idle_share": f"{total.idle_percent}%", "gpu_hours": f"{total.gpu_dh / 10:,.1f}",
            "spot_share": f"{total.spot_percent}%", "savings": usd(total.savings),
            "instances": total.instances, "cells": _cells(total, billed),
        },
        unattributed=usd(unattributed),
        chart_days=charts.stacked_days(costs, days),
        chart_idle=charts.idle_bars(idle_rows),
        chart_top=charts.top_idle_bars([
            (t.instance_id, f"{t.team} · {t.instance_type} · "
             f"{t.idle_gpu_seconds / 3600:,.0f} idle {kind_of(t.instance_type, 1)}-h",
             t.idle_cost_micros) for t in top]),
        headers=[*report.by, *_headers(report)],
        rows=[{"key": r.key, "cells": _cells(r, billed), "unattributed": UNATTRIBUTED in r.key}
              for r in rows],
        total_key=["total", *[""] * (len(report.by) - 1)] if report.by else [],
        schema=SCHEMA_VERSION,
        price_warnings=list(report.price_warnings),
        bill_total=(usd_micros(report.bill_total_micros)
                    if billed and report.bill_total_micros is not None else None),
        not_compared=[(p, w, usd(c)) for (p, w, _), c in zip(
            report.billed_not_compared, not_compared_cents(report), strict=True)],
        waste=report.waste,
        dollars=usd_float,
        standing=list(standing),
        standing_total=sum(line.usd_per_month for line in standing),
        reserved=[line.as_json() | {"label": line.label} for line in reserved],
    )
