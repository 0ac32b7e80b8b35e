"""`costguard report --by namespace|workload|pod|node|cluster` (and `--cluster`): GPU spend
and idle allocated GPUs per pod, workload, namespace and team, read from each cluster's
Prometheus over the report's period (docs/kubernetes.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console

from costguard.errors import CostguardError
from costguard.k8s.allocate import DIMENSIONS, CostLine, allocate, group
from costguard.k8s.model import ClusterRead
from costguard.k8s.prices import NodePrice, node_prices
from costguard.k8s.provider import ClusterSource, LiveCluster
from costguard.k8s.read import FIGURES_PER_DEVICE, MAX_POINTS_PER_READ
from costguard.k8s.settings import ClusterSettings
from costguard.model import Instance
from costguard.plain_lines import file_console, print_data, stdout_console
from costguard.report.cells import csv_text
from costguard.report.figures import share_percent
from costguard.report.fit import FitColumn, fit_table
from costguard.report.render import CENT, DECI_HOUR, apportion, usd

SCHEMA_VERSION = 1
# dimensions only a cluster has: asking for one makes the report a Kubernetes one
CLUSTER_ONLY = ("cluster", "namespace", "workload", "pod", "node")
MAX_STEPS = 8_640  # a report's steps per cluster: 30 days at 5 minutes
MIN_STEP = timedelta(minutes=5)
STEPS = tuple(timedelta(minutes=m) for m in (5, 10, 15, 20, 30, 60))  # each divides an hour


class KubeReportError(CostguardError, ValueError):
    """A Kubernetes report option costguard cannot use; the message says what would."""


def report_step(start: datetime, end: datetime, devices: int = 0) -> timedelta:
    """The finest of 5, 10, 15, 20, 30 and 60 minutes that keeps the period within
    `MAX_STEPS` steps and a read of `devices` GPU devices within `MAX_POINTS_PER_READ`
    points (each step's peak and mean judge a pod-hour as minutes do). A period too long
    for hourly steps is refused with the fix: an hour is the coarsest step that still
    judges each pod-hour."""
    span = (end - start).total_seconds()
    for step in STEPS:
        steps = math.ceil(span / step.total_seconds())
        if steps <= MAX_STEPS and devices * FIGURES_PER_DEVICE * steps <= MAX_POINTS_PER_READ:
            return step
    if devices * FIGURES_PER_DEVICE * math.ceil(span / 3600) <= MAX_POINTS_PER_READ:
        return STEPS[-1]  # past MAX_STEPS: the client asks for it in pieces
    days = MAX_POINTS_PER_READ / (max(1, devices) * FIGURES_PER_DEVICE * 24)
    raise KubeReportError(
        f"{devices:,} GPU devices over {span / 86400:.3g} days are more than one read holds "
        f"at hourly steps ({MAX_POINTS_PER_READ:,} figures): ask for at most {days:.3g} days "
        "at a time (--since/--until)")


@dataclass
class Unpriced:
    cluster: str
    node: str
    why: str
    gpu_hours: float


@dataclass
class ClusterReport:
    by: tuple[str, ...]
    since: datetime
    until: datetime
    step: timedelta
    clusters: list[str]
    lines: list[CostLine]
    filters: dict[str, str] = field(default_factory=dict)
    unpriced: list[Unpriced] = field(default_factory=list)
    queries: int = 0
    reads: list[ClusterRead] = field(default_factory=list)  # what the lines came from

    def rows(self) -> list[tuple[tuple[str, ...], CostLine]]:
        wanted = [cl for cl in self.lines
                  if all(cl.dimension(k) == v for k, v in self.filters.items())]
        return group(wanted, self.by)


def read_report(clusters: Sequence[ClusterSettings], by: Sequence[str], start: datetime,
                end: datetime, filters: Mapping[str, str], *, catalog: Any,
                inventory: Sequence[Instance], idle_signal: Any = "auto",
                idle_below: float = 5.0,
                sources: Mapping[str, ClusterSource] | None = None) -> ClusterReport:
    """The clusters over [start, end): each read from its Prometheus (or the source
    `sources` gives for it: the demo's simulated cluster)."""
    for dim in [*by, *filters]:
        if dim not in DIMENSIONS:
            raise KubeReportError(f"unknown Kubernetes dimension {dim!r} (choose from: "
                                  f"{', '.join(DIMENSIONS)})")
    chosen = {cfg.name: (sources or {}).get(cfg.name) or LiveCluster(cfg) for cfg in clusters}
    devices = max((s.devices(start, end) for s in chosen.values()), default=0)
    step = report_step(start, end, devices)
    aligned = datetime.fromtimestamp(start.timestamp() // step.total_seconds()
                                     * step.total_seconds(), start.tzinfo)
    out = ClusterReport(tuple(by), aligned, end, step, [c.name for c in clusters], [],
                        dict(filters))
    out.queries += sum(1 for s in chosen.values() if isinstance(s, LiveCluster))  # devices
    for cfg in clusters:
        read = chosen[cfg.name].read(aligned, end, step)
        prices = node_prices(read.nodes.values(), catalog, inventory)
        lines = allocate(read, prices, cfg, idle_signal=idle_signal, idle_below=idle_below)
        out.lines.extend(lines)
        out.reads.append(read)
        out.queries += read.calls
        out.unpriced.extend(_unpriced(cfg.name, lines, prices))
    return out


def _unpriced(cluster: str, lines: Sequence[CostLine], prices: Mapping[str, NodePrice]
              ) -> list[Unpriced]:
    hours: dict[str, float] = {}
    for cl in lines:
        if cl.unpriced_gpu_seconds:
            hours[cl.node] = hours.get(cl.node, 0.0) + cl.unpriced_gpu_seconds / 3600
    return [Unpriced(cluster, node, prices[node].via if node in prices else "no price",
                     round(h, 1)) for node, h in sorted(hours.items())]


HEADERS = ("spend", "idle", "idle %", "GPU-h", "idle GPU-h", "no data")
DROP_ORDER = ("idle GPU-h", "no data", "GPU-h", "idle %")


@dataclass(frozen=True)
class _Figures:
    """One row (or the total) as every format shows it: cents and tenths of a GPU-hour,
    apportioned so that the rows add up to the total as shown."""

    cost: int
    idle: int
    idle_percent: int
    gpu_dh: int
    idle_gpu_dh: int
    no_data: int

    def cells(self) -> list[str]:
        return [usd(self.cost), usd(self.idle), f"{self.idle_percent}%",
                f"{self.gpu_dh / 10:,.1f}", f"{self.idle_gpu_dh / 10:,.1f}", usd(self.no_data)]

    def values(self) -> list[str]:
        return [f"{self.cost / 100:.2f}", f"{self.idle / 100:.2f}", str(self.idle_percent),
                f"{self.gpu_dh / 10:.1f}", f"{self.idle_gpu_dh / 10:.1f}",
                f"{self.no_data / 100:.2f}"]


def _figures(report: ClusterReport) -> tuple[list[tuple[str, ...]], list[_Figures], _Figures]:
    rows = report.rows()
    lines = [cl for _, cl in rows]
    cost, cost_t = apportion([cl.cost_micros for cl in lines], CENT)
    idle, idle_t = apportion([cl.idle_cost_micros for cl in lines], CENT)
    nodata, nodata_t = apportion([cl.unmeasured_cost_micros for cl in lines], CENT)
    gpu, gpu_t = apportion([round(cl.gpu_seconds) for cl in lines], DECI_HOUR)
    igpu, igpu_t = apportion([round(cl.idle_gpu_seconds) for cl in lines], DECI_HOUR)
    total = CostLine("", "", "", "", "", "")
    for cl in lines:
        total.add(cl)
    figures = [_Figures(cost[i], idle[i], share_percent(cl.idle_cost_micros, cl.cost_micros),
                        gpu[i], igpu[i], nodata[i]) for i, cl in enumerate(lines)]
    footer = _Figures(cost_t, idle_t, share_percent(total.idle_cost_micros, total.cost_micros),
                      gpu_t, igpu_t, nodata_t)
    return [k for k, _ in rows], figures, footer


def to_table(report: ClusterReport, console: Console) -> None:
    keys, figures, total = _figures(report)
    cells, footer = [f.cells() for f in figures], total.cells()
    title = (f"Kubernetes GPU spend by {', '.join(report.by)}  "
             f"{report.since:%Y-%m-%d %H:%M} → {report.until:%Y-%m-%d %H:%M} UTC")
    if report.filters:
        title += "  where " + ", ".join(f"{k}={v}" for k, v in report.filters.items())
    cols = [FitColumn(dim, [k[i] for k in keys], "total" if i == 0 else "",
                      key=dim in ("pod", "node"))
            for i, dim in enumerate(report.by)]
    for j, name in enumerate(HEADERS):
        cols.append(FitColumn(name, [c[j] for c in cells], footer[j], numeric=True))
    fitted = fit_table(cols, console.width, DROP_ORDER, title=title)
    console.print(fitted.table, crop=False)
    if fitted.dropped:
        console.print(f"Left out to fit {console.width} columns: {', '.join(fitted.dropped)}. "
                      "--format csv or --format json shows every column.",
                      highlight=False, markup=False)
    if not keys:
        console.print("No GPU node ran in this period (--since widens it).", markup=False)
    for u in report.unpriced:
        console.print(f"Unpriced: node {u.node} of {u.cluster} ({u.gpu_hours:g} GPU-h): "
                      f"{u.why}.", highlight=False, markup=False)
    read = (f"Read from Prometheus at {_minutes(report.step)} steps in {report.queries} "
            "queries." if report.queries else f"Read at {_minutes(report.step)} steps.")
    console.print(f"idle: spend while a pod's GPUs were idle, and GPU nodes' capacity no pod "
                  f"requested; no data: a pod's spend in hours its GPUs had too little data "
                  f"to judge (never counted idle). {read}", highlight=False, markup=False)


def _minutes(step: timedelta) -> str:
    return f"{int(step.total_seconds() // 60)}-minute"


def to_csv(report: ClusterReport) -> str:
    keys, figures, _ = _figures(report)
    header: list[object] = [*report.by, "spend_usd", "idle_usd", "idle_percent", "gpu_hours",
                            "idle_gpu_hours", "no_data_usd"]
    return csv_text([header, *([*k, *f.values()] for k, f in zip(keys, figures,
                                                                   strict=True))])


def to_json(report: ClusterReport) -> str:
    return json.dumps(report_doc(report), indent=2)


def report_doc(report: ClusterReport) -> dict[str, Any]:
    """`costguard report --by ... --cluster ... --format json`, as a document (the console's
    Kubernetes page shows it)."""
    doc: dict[str, Any] = {
        "schema": SCHEMA_VERSION, "kind": "kubernetes", "by": list(report.by),
        "since": report.since.isoformat(), "until": report.until.isoformat(),
        "step_seconds": int(report.step.total_seconds()), "clusters": report.clusters,
        "filters": report.filters, "rows": [], "unpriced_nodes": [
            {"cluster": u.cluster, "node": u.node, "why": u.why, "gpu_hours": u.gpu_hours}
            for u in report.unpriced]}
    total = CostLine("", "", "", "", "", "")
    for key, cl in report.rows():
        doc["rows"].append({**dict(zip(report.by, key, strict=True)), **_json_figures(cl)})
        total.add(cl)
    doc["total"] = _json_figures(total)
    return doc


def _json_figures(cl: CostLine) -> dict[str, Any]:
    return {"cost_usd": round(cl.cost_micros / 1e6, 2),
            "idle_usd": round(cl.idle_cost_micros / 1e6, 2),
            "idle_percent": share_percent(cl.idle_cost_micros, cl.cost_micros),
            "no_data_usd": round(cl.unmeasured_cost_micros / 1e6, 2),
            "gpu_hours": round(cl.gpu_seconds / 3600, 2),
            "idle_gpu_hours": round(cl.idle_gpu_seconds / 3600, 2),
            "verdict_hours": dict(sorted(cl.verdicts.items()))}


def render(report: ClusterReport, fmt: str, output: Path | None,
           console: Console | None) -> str:
    if fmt == "table":
        if output is not None:
            with output.open("w", encoding="utf-8") as fh:
                con = file_console(fh, width=160, record=True, no_color=True)
                to_table(report, con)
            return con.export_text()
        to_table(report, console or stdout_console())
        return ""
    text = to_csv(report) if fmt == "csv" else to_json(report)
    if output is not None:
        output.write_text(text, encoding="utf-8")
    else:
        print_data(text)
    return text
