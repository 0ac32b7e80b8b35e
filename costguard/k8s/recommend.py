"""`costguard recommend --by pod` (and `--cluster`): each GPU pod's verdict over the
`recommend:` window, read from its cluster's Prometheus, as a person reads it (text) and
as a program does (JSON schema 1, CSV). The analysis is k8s/underused.py's."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from costguard.k8s.report import ClusterReport
from costguard.k8s.underused import PodEfficiency, judge_pods
from costguard.plain_lines import print_data
from costguard.recommend.render import blank, print_details, team_table, usd_short
from costguard.recommend.settings import RecommendSettings
from costguard.report.cells import csv_text, text_cell
from costguard.telemetry.efficiency import Bottleneck

SCHEMA = 1


@dataclass(frozen=True)
class PodRecommendations:
    since: datetime
    until: datetime
    clusters: list[str]
    items: list[PodEfficiency]  # every GPU pod judged, largest saving first

    @property
    def underused(self) -> list[PodEfficiency]:
        return [p for p in self.items if p.efficiency.underused]

    def by_team(self) -> dict[str, dict[str, float]]:
        """Per team: spend on underused pods in the window, and $/month the fits save."""
        out: dict[str, dict[str, float]] = defaultdict(
            lambda: {"underused_usd": 0.0, "monthly_savings_usd": 0.0, "pods": 0})
        for p in self.underused:
            row = out[p.line.team]
            row["underused_usd"] += p.underused_usd
            row["monthly_savings_usd"] += p.monthly_usd
            row["pods"] += 1
        return {team: {k: round(v, 2) for k, v in row.items()}
                for team, row in sorted(out.items(), key=lambda kv: -kv[1]["underused_usd"])}


def pod_recommendations(report: ClusterReport, settings: RecommendSettings
                        ) -> PodRecommendations:
    items = [p for read in report.reads for p in judge_pods(read, report.lines, settings)
             if all(p.line.dimension(k) == v for k, v in report.filters.items())]
    items.sort(key=lambda p: (-p.monthly_usd, -p.line.cost_micros, p.line.pod))
    return PodRecommendations(report.since, report.until, report.clusters, items)


def _summary(recs: PodRecommendations) -> dict[str, Any]:
    under = recs.underused
    return {"gpu_pods": len(recs.items), "underused": len(under),
            "underused_usd": round(sum(p.underused_usd for p in under), 2),
            "monthly_savings_usd": round(sum(p.monthly_usd for p in under), 2),
            "insufficient_data": sum(1 for p in recs.items if p.efficiency.bottleneck
                                     is Bottleneck.INSUFFICIENT_DATA)}


def headline(recs: PodRecommendations) -> str:
    s = _summary(recs)
    days = (recs.until - recs.since).total_seconds() / 86400
    text = (f"GPU pods that do a little, {recs.since:%Y-%m-%d %H:%M} to "
            f"{recs.until:%Y-%m-%d %H:%M} UTC ({days:.3g} days, "
            f"{', '.join(recs.clusters)}): {s['underused']} of {s['gpu_pods']} GPU pods "
            f"underused, {usd_short(s['underused_usd'])} spent on them; requesting only the GPUs "
            f"used saves {usd_short(s['monthly_savings_usd'])}/month")
    if s["insufficient_data"]:
        text += f"; {s['insufficient_data']} not judged (too few readings)"
    return text


def _shown(recs: PodRecommendations, everything: bool) -> list[PodEfficiency]:
    return recs.items if everything else recs.underused


def print_text(console: Console, recs: PodRecommendations, everything: bool) -> None:
    console.print(headline(recs), highlight=False, markup=False)
    shown = _shown(recs, everything)
    if not shown:
        return
    table = Table(box=None, pad_edge=False)
    table.add_column("pod", overflow="fold", ratio=1)
    for name in ("bottleneck", "GPUs used", "request"):
        table.add_column(name, no_wrap=True)
    table.add_column("saves/month", justify="right", no_wrap=True)
    for p in shown:
        e = p.efficiency
        used = "-" if e.gpus_used is None else f"{e.gpus_used}/{e.gpus_paid}"
        unit = "slice" if "mig-" in p.gpu_resource else "GPU"
        request = (f"{p.fit_gpus} {unit}{'s' if p.fit_gpus > 1 else ''}" if p.fit_gpus
                   else "-")
        saves = usd_short(p.monthly_usd) if p.monthly_usd > 0 else "-"
        table.add_row(f"{p.line.namespace}/{p.line.pod}", str(e.bottleneck), used, request,
                      saves)
    console.print(table)
    print_details(console, [detail(p) for p in shown])


def detail(p: PodEfficiency) -> list[str]:
    """What a person needs to act on one pod, one fact per line."""
    e, cl = p.efficiency, p.line
    out = [f"{cl.namespace}/{cl.pod} ({cl.workload}, cluster {cl.cluster}, node {cl.node}): "
           f"{p.efficiency.gpus_paid} x {p.gpu_resource}, team {cl.team}, "
           f"{usd_short(p.spend_usd)} in the window; {e.bottleneck}"]
    out += [f"  - {line}" for line in e.evidence]
    if p.fit_gpus and p.usd_per_gpu_hour is not None:
        out.append(f"  fit: request {p.fit_gpus} x {p.gpu_resource} instead of "
                   f"{e.gpus_paid}, saves {usd_short(p.monthly_usd)}/month at "
                   f"${p.usd_per_gpu_hour:,.4g} a GPU-hour (its node's GPU rate)")
    return out


def print_teams(console: Console, recs: PodRecommendations) -> None:
    console.print(headline(recs), highlight=False, markup=False)
    console.print(team_table(recs.by_team(), "pods", "underused pods"))


def _item(p: PodEfficiency) -> dict[str, Any]:
    e, cl = p.efficiency, p.line
    measured = e.model_dump(mode="json", exclude={"bottleneck", "underused", "evidence",
                                                  "window_start", "window_end"})
    return {
        "cluster": cl.cluster, "namespace": cl.namespace, "workload": cl.workload,
        "pod": cl.pod, "node": cl.node, "team": cl.team, "gpu_resource": p.gpu_resource,
        "spend_usd": round(p.spend_usd, 2), "underused_usd": round(p.underused_usd, 2),
        "bottleneck": str(e.bottleneck), "underused": e.underused,
        "evidence": list(e.evidence), "advice": p.advice, "measured": measured,
        "fit": {"gpus": p.fit_gpus, "usd_per_gpu_hour": (
            None if p.usd_per_gpu_hour is None else round(p.usd_per_gpu_hour, 6)),
                "monthly_savings_usd": p.monthly_usd},
    }


def to_json(recs: PodRecommendations, settings: RecommendSettings, everything: bool) -> str:
    return json.dumps(recommend_doc(recs, settings, everything), indent=2)


def recommend_doc(recs: PodRecommendations, settings: RecommendSettings,
                  everything: bool) -> dict[str, Any]:
    return {"schema": SCHEMA, "kind": "kubernetes",
            "since": recs.since.isoformat(), "until": recs.until.isoformat(),
            "clusters": recs.clusters, "settings": settings.model_dump(mode="json"),
            "summary": _summary(recs), "by_team": recs.by_team(),
            "items": [_item(p) for p in _shown(recs, everything)]}


CSV_COLUMNS = ("cluster", "namespace", "workload", "pod", "node", "team", "gpu_resource",
               "bottleneck", "underused", "gpus_requested", "gpus_used", "gpu_mean",
               "vram_peak_gb", "pod_cpu_p95", "spend_usd", "fit_gpus", "usd_per_gpu_hour",
               "monthly_savings_usd")


def to_csv(recs: PodRecommendations, everything: bool) -> str:
    out: list[Sequence[object]] = [CSV_COLUMNS]
    for p in _shown(recs, everything):
        e, cl = p.efficiency, p.line
        out.append([
            text_cell(cl.cluster), text_cell(cl.namespace), text_cell(cl.workload),
            text_cell(cl.pod), text_cell(cl.node), text_cell(cl.team), p.gpu_resource,
            str(e.bottleneck), str(e.underused).lower(), e.gpus_paid, blank(e.gpus_used),
            blank(e.gpu_mean), "" if e.vram_peak_bytes is None else
            f"{e.vram_peak_bytes / 1e9:.2f}", blank(e.host_cpu_p95),
            f"{p.spend_usd:.2f}", blank(p.fit_gpus),
            "" if p.usd_per_gpu_hour is None else f"{p.usd_per_gpu_hour:.4f}",
            f"{p.monthly_usd:.2f}"])
    return csv_text(out)


def to_team_csv(recs: PodRecommendations) -> str:
    out: list[Sequence[object]] = [("team", "underused_pods", "underused_usd",
                                    "monthly_savings_usd")]
    for team, row in recs.by_team().items():
        out.append((text_cell(team), int(row["pods"]), f"{row['underused_usd']:.2f}",
                    f"{row['monthly_savings_usd']:.2f}"))
    return csv_text(out)


def render(recs: PodRecommendations, settings: RecommendSettings, fmt: str, by: str,
           everything: bool, console: Console) -> None:
    if fmt == "json":
        print_data(to_json(recs, settings, everything))
    elif fmt == "csv":
        print_data(to_team_csv(recs) if by == "team" else to_csv(recs, everything), end="")
    elif by == "team":
        print_teams(console, recs)
    else:
        print_text(console, recs, everything)
