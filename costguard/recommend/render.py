"""`costguard recommend` as a person reads it (text), and as a program does (JSON, CSV).

JSON (schema 1, documented in docs/recommend.md): the window, the thresholds, a summary,
`by_team`, and one item per GPU instance judged (with `--all`; else the underused ones):
its verdict with the numbers behind it, and the fit (`to` null when there is none, with
the reason).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from costguard.recommend.fit import Fit
from costguard.recommend.run import Recommendation, Recommendations
from costguard.recommend.settings import RecommendSettings
from costguard.report.cells import csv_text, text_cell
from costguard.telemetry.efficiency import Bottleneck

SCHEMA = 1


def _item(r: Recommendation) -> dict[str, Any]:
    fit, e, inst = r.fit, r.fit.efficiency, r.fit.instance
    measured = e.model_dump(mode="json", exclude={"bottleneck", "underused", "evidence",
                                                  "window_start", "window_end"})
    return {
        "provider": inst.provider, "account": inst.account, "region": inst.region,
        "instance_id": inst.instance_id, "name": inst.name,
        "instance_type": inst.instance_type, "lifecycle": str(inst.lifecycle),
        "team": r.team, "spend_usd": r.spend_usd, "underused_usd": round(r.underused_usd, 2),
        "bottleneck": str(e.bottleneck), "underused": e.underused,
        "evidence": list(e.evidence), "advice": e.advice, "measured": measured,
        "fit": _fit(fit),
    }


def _fit(fit: Fit) -> dict[str, Any]:
    return {
        "to": fit.to.instance_type if fit.to else None,
        "to_shape": fit.to.label if fit.to else None,
        "usd_per_hour": fit.usd_per_hour, "to_usd_per_hour": fit.to_usd_per_hour,
        "monthly_savings_usd": fit.monthly_usd, "price_basis": fit.price_basis or None,
        "needs": fit.needs or None, "reason": fit.reason, "risks": list(fit.risks),
    }


def _shown(recs: Recommendations, everything: bool) -> list[Recommendation]:
    return recs.items if everything else recs.underused


def to_json(recs: Recommendations, settings: RecommendSettings, everything: bool) -> str:
    return json.dumps(recommend_doc(recs, settings, everything), indent=2)


def recommend_doc(recs: Recommendations, settings: RecommendSettings,
                  everything: bool) -> dict[str, Any]:
    """`costguard recommend --format json`, as a document (the console's API serves it)."""
    return {
        "schema": SCHEMA,
        "since": recs.since.isoformat(), "until": recs.until.isoformat(),
        "settings": settings.model_dump(mode="json"),
        "summary": _summary(recs),
        "by_team": recs.by_team(),
        "items": [_item(r) for r in _shown(recs, everything)],
    }


def _summary(recs: Recommendations) -> dict[str, Any]:
    under = recs.underused
    return {"gpu_instances": len(recs.items), "underused": len(under),
            "underused_usd": round(sum(r.underused_usd for r in under), 2),
            "monthly_savings_usd": round(sum(max(0.0, r.fit.monthly_usd) for r in under), 2),
            "insufficient_data": sum(1 for r in recs.items if r.fit.efficiency.bottleneck
                                     is Bottleneck.INSUFFICIENT_DATA),
            # verdicts taken as the daemon stored them (judged within recommend.refresh)
            "stored_verdicts": recs.reused,
            "oldest_stored_verdict": (recs.oldest_reused.isoformat()
                                      if recs.oldest_reused else None)}


CSV_COLUMNS = ("provider", "instance_id", "name", "instance_type", "team", "bottleneck",
               "underused", "gpus_paid", "gpus_used", "gpu_mean", "vram_peak_gb",
               "host_cpu_p95", "spend_usd", "fit", "usd_per_hour", "fit_usd_per_hour",
               "monthly_savings_usd", "reason")


def to_csv(recs: Recommendations, everything: bool) -> str:
    out: list[Sequence[object]] = [CSV_COLUMNS]
    for r in _shown(recs, everything):
        f, e, i = r.fit, r.fit.efficiency, r.fit.instance
        out.append([
            i.provider, i.instance_id, text_cell(i.name or ""), i.instance_type,
            text_cell(r.team), str(e.bottleneck),
            str(e.underused).lower(), e.gpus_paid, blank(e.gpus_used), blank(e.gpu_mean),
            "" if e.vram_peak_bytes is None else f"{e.vram_peak_bytes / 1e9:.2f}",
            blank(e.host_cpu_p95), f"{r.spend_usd:.2f}", f.to.instance_type if f.to else "",
            blank(f.usd_per_hour), blank(f.to_usd_per_hour), f"{f.monthly_usd:.2f}", f.reason])
    return csv_text(out)


def to_team_csv(recs: Recommendations) -> str:
    out: list[Sequence[object]] = [
        ("team", "underused_instances", "underused_usd", "monthly_savings_usd")]
    for team, row in recs.by_team().items():
        out.append((text_cell(team), int(row["instances"]), f"{row['underused_usd']:.2f}",
                         f"{row['monthly_savings_usd']:.2f}"))
    return csv_text(out)


def blank(value: object) -> str:
    """A CSV cell: empty for None."""
    return "" if value is None else str(value)


def usd_short(value: float) -> str:
    """Dollars as a person reads a sum: whole dollars from $100."""
    return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.2f}"


def headline(recs: Recommendations) -> str:
    s = _summary(recs)
    days = (recs.until - recs.since).total_seconds() / 86400
    text = (f"Waste beyond idle, {recs.since:%Y-%m-%d} to {recs.until:%Y-%m-%d} ({days:g} days): "
            f"{s['underused']} of {s['gpu_instances']} GPU instances underused, "
            f"{usd_short(s['underused_usd'])} spent on them; the fits save "
            f"{usd_short(s['monthly_savings_usd'])}/month")
    if s["insufficient_data"]:
        text += f"; {s['insufficient_data']} not judged (too few readings)"
    if recs.reused and recs.oldest_reused is not None:
        text += (f"; {recs.reused} verdicts as the daemon judged them (the oldest at "
                 f"{recs.oldest_reused:%Y-%m-%d %H:%M} UTC; --fresh judges them all now)")
    return text


def print_text(console: Console, recs: Recommendations, everything: bool) -> None:
    console.print(headline(recs), highlight=False)
    shown = _shown(recs, everything)
    if not shown:
        return
    table = Table(box=None, pad_edge=False)
    for name in ("instance", "bottleneck", "GPUs used", "fit"):
        table.add_column(name, overflow="fold")
    table.add_column("saves/month", justify="right", no_wrap=True)
    for r in shown:
        f, e = r.fit, r.fit.efficiency
        used = "-" if e.gpus_used is None else f"{e.gpus_used}/{e.gpus_paid}"
        saves = usd_short(f.monthly_usd) if f.to and f.monthly_usd > 0 else "-"
        table.add_row(r.fit.instance.name or r.fit.instance.instance_id, str(e.bottleneck),
                      used, f.to.instance_type if f.to else "-", saves)
    console.print(table)
    print_details(console, [detail(r) for r in shown])


def print_details(console: Console, blocks: Sequence[Sequence[str]]) -> None:
    """Each item's facts under the table, a blank line before each, never wrapped."""
    for block in blocks:
        console.print("", highlight=False)
        for line in block:
            console.print(line, highlight=False, markup=False, soft_wrap=True)


def detail(r: Recommendation) -> list[str]:
    """What a person needs to act on one instance, one fact per line."""
    f, e, i = r.fit, r.fit.efficiency, r.fit.instance
    name = f"{i.name} ({i.instance_id})" if i.name else i.instance_id
    out = [f"{name}: {i.instance_type} in {i.region}, team {r.team}, "
           f"{usd_short(r.spend_usd)} in the window; {e.bottleneck}"]
    out += [f"  - {line}" for line in e.evidence]
    if f.to is not None and f.usd_per_hour is not None and f.to_usd_per_hour is not None:
        verb = "saves" if f.monthly_usd >= 0 else "costs"
        out.append(f"  fit: {f.to.instance_type} ({f.to.label}) at ${f.to_usd_per_hour:,.4g}/h "
                   f"instead of ${f.usd_per_hour:,.4g}/h, {verb} {usd_short(abs(f.monthly_usd))}"
                   f"/month ({f.price_basis}); {f.reason}")
        out.append(f"  holds: {f.needs}")
        out += [f"  risk: {risk}" for risk in f.risks]
    elif f.reason and f.reason != e.advice:
        out.append(f"  no fit: {f.reason}")
    return out


def print_teams(console: Console, recs: Recommendations) -> None:
    console.print(headline(recs), highlight=False)
    console.print(team_table(recs.by_team(), "instances", "underused"))


def team_table(by_team: Mapping[str, Mapping[str, float]], counted: str, header: str
               ) -> Table:
    """Per team: how many underused (`counted` of each row), their spend, the fits' saving."""
    table = Table("team", header, "spent on them", "fits save/month", box=None,
                  pad_edge=False)
    for team, row in by_team.items():
        saves = row["monthly_savings_usd"]
        table.add_row(team, str(int(row[counted])), usd_short(row["underused_usd"]),
                      usd_short(saves) if saves > 0 else "-")
    return table
