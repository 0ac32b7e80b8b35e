"""Render a spend report as a rich table, CSV or stable JSON (HTML lives in `html.py`).

Money is shown in cents that add up: each column is apportioned by largest remainder, so
the rows' displayed cents always sum to the displayed total, which is the exact total
rounded half-up. GPU-hours are apportioned the same way at 0.1 h.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from costguard.costs.attribution import UNATTRIBUTED
from costguard.report.cells import csv_text, text_cell
from costguard.report.figures import Report, ReportRow
from costguard.report.fit import FitColumn, fit_table

SCHEMA_VERSION = 2
CENT = 10_000  # micro-dollars per cent
DECI_HOUR = 360  # GPU-seconds per 0.1 GPU-hour


def _round_half_up(value: int, unit: int) -> int:
    q, r = divmod(value, unit)
    return q + (1 if 2 * r >= unit else 0)


def apportion(values: Sequence[int], unit: int) -> tuple[list[int], int]:
    """Display `values` in whole `unit`s so that they sum to the rounded total exactly.

    Largest remainder (Hamilton): floor every value, then give the units still missing to
    the values that lost the most to flooring (ties go to the earlier row).
    """
    total_units = _round_half_up(sum(values), unit)
    floors = [v // unit for v in values]
    missing = total_units - sum(floors)
    order = sorted(range(len(values)), key=lambda i: (-(values[i] % unit), i))
    for i in order[:max(missing, 0)]:
        floors[i] += 1
    return floors, total_units


@dataclass(frozen=True)
class DisplayRow:
    key: tuple[str, ...]
    cost: int  # cents
    idle: int
    savings: int
    billed: int | None
    gpu_dh: int  # tenths of a GPU-hour
    idle_share: float
    spot_share: float
    instances: int
    idle_percent: int = 0  # figures.share_percent: the one rounding every surface shows
    spot_percent: int = 0

    @property
    def gap(self) -> int | None:
        return None if self.billed is None else self.billed - self.cost


def display_rows(report: Report) -> tuple[list[DisplayRow], DisplayRow]:
    rows, t = report.rows, report.total
    cost, cost_t = apportion([r.cost_micros for r in rows], CENT)
    idle, idle_t = apportion([r.idle_cost_micros for r in rows], CENT)
    sav, sav_t = apportion([r.savings_micros for r in rows], CENT)
    gpu, gpu_t = apportion([r.gpu_seconds for r in rows], DECI_HOUR)
    billed_t: int | None = None
    billed: list[int | None] = [None] * len(rows)
    if report.compare == "billed":
        b, billed_t = apportion([r.billed_micros or 0 for r in rows], CENT)
        billed = list(b)
    if not rows:  # grouped by nothing: the total stands alone
        cost_t, idle_t = _round_half_up(t.cost_micros, CENT), _round_half_up(
            t.idle_cost_micros, CENT)
        sav_t, gpu_t = _round_half_up(t.savings_micros, CENT), _round_half_up(
            t.gpu_seconds, DECI_HOUR)
        if report.compare == "billed":
            billed_t = _round_half_up(t.billed_micros or 0, CENT)
    out = [DisplayRow(r.key, cost[i], idle[i], sav[i], billed[i], gpu[i], r.idle_share,
                      r.spot_share, r.instances, r.idle_percent, r.spot_percent)
           for i, r in enumerate(rows)]
    total = DisplayRow((), cost_t, idle_t, sav_t, billed_t, gpu_t, t.idle_share, t.spot_share,
                       t.instances, t.idle_percent, t.spot_percent)
    return out, total


def usd(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}${abs(cents) // 100:,}.{abs(cents) % 100:02d}"


def dollars(cents: int) -> float:
    return round(cents / 100, 2)


def usd_float(amount: float) -> str:
    """Dollars held as a float (rounded to the cent already), as `usd_micros` writes them."""
    return usd_micros(round(amount * 1e6))


def usd_micros(micros: int) -> str:
    return usd(_round_half_up(micros, CENT))


def _row_json(by: tuple[str, ...], r: DisplayRow) -> dict[str, Any]:
    doc: dict[str, Any] = {
        **dict(zip(by, r.key, strict=True)),
        "cost_usd": dollars(r.cost),
        "idle_cost_usd": dollars(r.idle),
        "idle_share": round(r.idle_share, 4),
        "spot_share": round(r.spot_share, 4),
        "idle_percent": r.idle_percent,  # rounded once, as every surface shows it
        "spot_percent": r.spot_percent,
        "spot_savings_possible_usd": dollars(r.savings),
        "gpu_hours": r.gpu_dh / 10,
        "instances": r.instances,
    }
    if r.billed is not None:
        doc["billed_usd"] = dollars(r.billed)
        doc["gap_usd"] = dollars(r.gap or 0)
    return doc


def to_json(report: Report) -> str:
    return json.dumps(report_doc(report), indent=2)


def report_doc(report: Report) -> dict[str, Any]:
    """`costguard report --format json`, as a document (the console's spend API serves it)."""
    rows, total = display_rows(report)
    doc: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "currency": "USD",
        "by": list(report.by),
        "since": report.since.isoformat(),
        "until": report.until.isoformat(),
        "filters": dict(report.filters),
        "compare": report.compare,
        "rows": [_row_json(report.by, r) for r in rows],
        "total": _row_json((), total),
        "price_warnings": list(report.price_warnings),
    }
    if report.waste is not None:
        doc["waste_beyond_idle"] = waste_json(report)
    if report.compare == "billed":
        doc["bill_total_usd"] = dollars(_round_half_up(report.bill_total_micros or 0, CENT))
        doc["billed_not_compared"] = [
            {"provider": provider, "what": what, "billed_usd": dollars(cents)}
            for (provider, what, _), cents in zip(
                report.billed_not_compared, not_compared_cents(report), strict=True)]
    return doc


def waste_json(report: Report) -> dict[str, Any]:
    w = report.waste
    assert w is not None
    return {"since": w.since.isoformat(), "until": w.until.isoformat(),
            "gpu_instances": w.judged, "underused": w.underused,
            "underused_usd": w.underused_usd, "monthly_savings_usd": w.monthly_savings_usd,
            "by_team": w.by_team,
            "top": [{"instance": t.instance, "team": t.team, "bottleneck": t.bottleneck,
                     "gpus_used": t.gpus_used, "fit": t.fit, "monthly_savings_usd": t.monthly_usd}
                    for t in w.top],
            "stored_verdicts": w.stored,
            "oldest_stored_verdict": w.oldest_stored.isoformat() if w.oldest_stored else None}


def not_compared_cents(report: Report) -> list[int]:
    """The not-compared rows in cents that add up with the compared rows to the bill."""
    return apportion([m for _, _, m in report.billed_not_compared], CENT)[0]


def _headers(report: Report) -> list[str]:
    # grouped by accelerator, an hour of a TPU chip or a Neuron device is no GPU-hour
    hours = "accel-h" if "accelerator" in report.by else "GPU-h"
    cols = ["cost", "idle cost", "idle %", hours, "spot %", "spot savings possible",
            "instances"]
    if report.compare == "billed":
        cols += ["billed", "gap (billed - estimated)"]
    return cols


def _cells(r: DisplayRow, billed: bool) -> list[str]:
    cells = [usd(r.cost), usd(r.idle), f"{r.idle_percent}%", f"{r.gpu_dh / 10:,.1f}",
             f"{r.spot_percent}%", usd(r.savings), str(r.instances)]
    if billed:
        cells += [usd(r.billed or 0), usd(r.gap or 0)]
    return cells


def to_csv(report: Report) -> str:
    rows, total = display_rows(report)
    out: list[list[str]] = []
    billed = report.compare == "billed"
    out.append([*report.by, "cost_usd", "idle_cost_usd", "idle_share", "gpu_hours",
                     "spot_share", "spot_savings_possible_usd", "instances",
                     *(["billed_usd", "gap_usd"] if billed else [])])

    def values(r: DisplayRow) -> list[str]:
        out = [f"{r.cost / 100:.2f}", f"{r.idle / 100:.2f}", f"{r.idle_share:.4f}",
               f"{r.gpu_dh / 10:.1f}", f"{r.spot_share:.4f}", f"{r.savings / 100:.2f}",
               str(r.instances)]
        if billed:
            out += [f"{(r.billed or 0) / 100:.2f}", f"{(r.gap or 0) / 100:.2f}"]
        return out

    for r in rows:
        out.append([*(text_cell(k) for k in r.key), *values(r)])
    # grouped by nothing, the total is the only row and has no key column to name it in
    label = ["total", *[""] * (len(report.by) - 1)] if report.by else []
    out.append([*label, *values(total)])
    return csv_text(out)


# Left out first to last when a terminal is too narrow for every column; cost never is.
DROP_ORDER = ("instances", "spot %", "idle %", "GPU-h", "accel-h", "spot savings possible",
              "idle cost", "gap (billed - estimated)", "billed")


def table_columns(report: Report) -> tuple[list[FitColumn], list[str | None]]:
    """The table's columns (key dimensions, then figures) and each row's style."""
    rows, total = display_rows(report)
    billed = report.compare == "billed"
    cols = [FitColumn(dim, [r.key[i] for r in rows], "total" if i == 0 else "")
            for i, dim in enumerate(report.by)]
    body = [_cells(r, billed) for r in rows]
    for j, (name, footer) in enumerate(zip(_headers(report), _cells(total, billed),
                                           strict=True)):
        cols.append(FitColumn(name, [cells[j] for cells in body], footer, numeric=True))
    styles = ["yellow" if UNATTRIBUTED in r.key else None for r in rows]
    return cols, styles


def to_table(report: Report, console: Console) -> None:
    """Print the report as a table fitted to the console; figures are never cut.

    Columns that do not fit are left out (least important first) and named below it.
    """
    title = (f"Spend by {', '.join(report.by) or 'nothing'}  "
             f"{report.since:%Y-%m-%d %H:%M} → {report.until:%Y-%m-%d %H:%M} UTC")
    if report.filters:
        title += "  where " + ", ".join(f"{k}={v}" for k, v in report.filters.items())
    cols, styles = table_columns(report)
    fitted = fit_table(cols, console.width, DROP_ORDER, title=title, row_styles=styles)
    console.print(fitted.table, crop=False)
    if fitted.dropped:
        console.print(f"Left out to fit {console.width} columns: {', '.join(fitted.dropped)}. "
                      "A wider terminal, --format csv or --format json shows every column.",
                      highlight=False, markup=False)
    billed_notes(report, console)
    price_notes(report, console)
    waste_notes(report, console)


def waste_notes(report: Report, console: Console) -> None:
    """Waste beyond idle: underused GPU spend per team and the largest fits."""
    w = report.waste
    if w is None or not w.underused:
        return
    console.print(f"Waste beyond idle ({w.since:%Y-%m-%d} to {w.until:%Y-%m-%d}): "
                  f"{w.underused} of {w.judged} GPU instances underused, "
                  f"{usd_float(w.underused_usd)} spent on them; fits save "
                  f"{usd_float(w.monthly_savings_usd)}/month",
                  style="bold", highlight=False, markup=False)
    if w.stored and w.oldest_stored is not None:
        console.print(f"  ({w.stored} verdicts as the daemon judged them, the oldest at "
                      f"{w.oldest_stored:%Y-%m-%d %H:%M} UTC)", highlight=False, markup=False)
    for team, row in w.by_team.items():
        saves = row["monthly_savings_usd"]
        console.print(f"  {team:<16} {usd_float(row['underused_usd']):>12} on "
                      f"{row['instances']:g} underused"
                      + (f", fits save {usd_float(saves)}/month" if saves else ""),
                      highlight=False, markup=False)
    table = Table(box=None, pad_edge=False)
    for name in ("instance", "bottleneck", "GPUs used", "fit"):
        table.add_column(name, overflow="fold")
    table.add_column("saves/month", justify="right", no_wrap=True)
    for line in w.top:
        table.add_row(line.instance, line.bottleneck, line.gpus_used, line.fit or "-",
                      usd_float(line.monthly_usd) if line.fit else "-")
    console.print(table)
    if w.underused > len(w.top):  # said 6 underused and listed 5, without a word
        console.print(f"  the {len(w.top)} largest of the {w.underused} underused; costguard "
                      "recommend lists every one", highlight=False, markup=False)
    console.print("  Evidence, fits and risks: costguard recommend", highlight=False,
                  markup=False)


def billed_notes(report: Report, console: Console, most: int = 8) -> None:
    """What the bill holds besides the compared instances, each kind as its own row."""
    if report.compare != "billed" or report.bill_total_micros is None:
        return
    console.print(f"Whole bill in the period: {usd_micros(report.bill_total_micros)} "
                  "(BilledCost). Billed above: the usage of the instances costguard watches, "
                  "at EffectiveCost (discounts and commitments included).",
                  highlight=False, markup=False)
    rows = report.billed_not_compared
    if not rows:
        return
    console.print("Billed, not compared with estimates:", style="bold", highlight=False)
    for (provider, what, _), cents in list(zip(rows, not_compared_cents(report),
                                               strict=True))[:most]:
        console.print(f"  {usd(cents):>14}  {provider:<6} {what}", highlight=False,
                      markup=False)
    if len(rows) > most:
        console.print(f"  ... and {len(rows) - most} more (--format json lists them)",
                      highlight=False, markup=False)


def price_notes(report: Report, console: Console, most: int = 3) -> None:
    """Name the spend priced from a fallback or a stale price, and how to fix it."""
    warnings = report.price_warnings
    if not warnings:
        return
    console.print("Prices to check:", style="yellow", highlight=False)
    for text in warnings[:most]:
        console.print(f"  {text}", highlight=False, markup=False)
    if len(warnings) > most:
        console.print(f"  ... and {len(warnings) - most} more source(s) (--format json "
                      "lists them)", highlight=False, markup=False)
    console.print("  Fetch current list prices: costguard prices refresh; explain one: "
                  "costguard prices show TYPE. Disk prices of stopped instances come from "
                  "the shipped tables or the `disks` of costs.price_overrides.",
                  highlight=False, markup=False)


__all__ = ["SCHEMA_VERSION", "ReportRow", "apportion", "display_rows", "to_csv", "to_json",
           "to_table", "usd"]
