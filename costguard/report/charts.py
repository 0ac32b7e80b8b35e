"""Inline SVG charts for the HTML report: no script, no CDN, readable when printed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape

PALETTE = ["#3b6fd8", "#e8833a", "#3aa57a", "#c84a6b", "#8a63c9", "#c9a227", "#4aa3b8",
           "#7f8c8d"]
IDLE = "#d9534f"
BUSY = "#5b8def"
FONT = "font-family='system-ui,-apple-system,Segoe UI,sans-serif'"


def _money(usd: float) -> str:
    if usd >= 10_000:
        return f"${usd / 1000:,.0f}k"
    if usd >= 1000:
        return f"${usd / 1000:,.1f}k"
    return f"${usd:,.0f}"


def stacked_days(series: Mapping[str, Mapping[datetime, int]], days: Sequence[datetime],
                 *, width: int = 860, height: int = 300, top: int = 6) -> str:
    """Stacked columns: spend per day, one colour per series (the biggest `top`, then other)."""
    totals = {name: sum(v.values()) for name, v in series.items()}
    names = sorted(totals, key=lambda n: -totals[n])
    shown, rest = names[:top], names[top:]
    stacks: list[tuple[str, list[int]]] = [
        (n, [series[n].get(d, 0) for d in days]) for n in shown]
    if rest:
        stacks.append(("other", [sum(series[n].get(d, 0) for n in rest) for d in days]))
    left, right, pad_top, bottom = 64, 150, 16, 36
    plot_w, plot_h = width - left - right, height - pad_top - bottom
    peak = max((sum(s[1][i] for s in stacks) for i in range(len(days))), default=0) or 1
    peak_usd = _nice(peak / 1e6)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' "
             f"role='img' aria-label='Spend per day' {FONT} font-size='11'>"]
    for i in range(5):
        y = pad_top + plot_h - plot_h * i / 4
        parts.append(f"<line x1='{left}' x2='{left + plot_w}' y1='{y:.1f}' y2='{y:.1f}' "
                     "stroke='#e5e7eb'/>")
        parts.append(f"<text x='{left - 8}' y='{y + 4:.1f}' text-anchor='end' fill='#6b7280'>"
                     f"{_money(peak_usd * i / 4)}</text>")
    n = max(len(days), 1)
    slot = plot_w / n
    bar = max(slot * 0.72, 1)
    label_every = max(1, n // 10)
    for i, day in enumerate(days):
        x = left + i * slot + (slot - bar) / 2
        y = pad_top + plot_h
        for k, (name, values) in enumerate(stacks):
            h = plot_h * (values[i] / 1e6) / peak_usd
            if h <= 0:
                continue
            y -= h
            parts.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{bar:.1f}' height='{h:.1f}' "
                         f"fill='{PALETTE[k % len(PALETTE)]}'><title>{escape(name)} "
                         f"{day:%b %d}: ${values[i] / 1e6:,.2f}</title></rect>")
        if i % label_every == 0:
            parts.append(f"<text x='{x + bar / 2:.1f}' y='{height - bottom + 16}' "
                         f"text-anchor='middle' fill='#6b7280'>{day:%b %d}</text>")
    for k, (name, values) in enumerate(stacks):
        y = pad_top + 6 + k * 20
        parts.append(f"<rect x='{width - right + 16}' y='{y}' width='12' height='12' rx='2' "
                     f"fill='{PALETTE[k % len(PALETTE)]}'/>")
        parts.append(f"<text x='{width - right + 34}' y='{y + 10}' fill='#111827'>"
                     f"{escape(name[:14])} {_money(sum(values) / 1e6)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def idle_bars(rows: Sequence[tuple[str, int, int]], *, width: int = 860) -> str:
    """Per row (name, cost, idle cost): one bar, its idle part red, the share written."""
    rows = list(rows)[:12]
    height = 24 + 30 * len(rows)
    left, right = 150, 190
    plot_w = width - left - right
    peak = max((c for _, c, _ in rows), default=0) or 1
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' "
             f"role='img' aria-label='Idle share' {FONT} font-size='12'>"]
    for i, (name, cost, idle) in enumerate(rows):
        y = 12 + i * 30
        w = plot_w * cost / peak
        wi = plot_w * idle / peak
        share = idle / cost if cost else 0.0
        parts.append(f"<text x='{left - 10}' y='{y + 15}' text-anchor='end' fill='#111827'>"
                     f"{escape(name[:22])}</text>")
        parts.append(f"<rect x='{left}' y='{y}' width='{w:.1f}' height='20' rx='3' "
                     f"fill='{BUSY}'/>")
        parts.append(f"<rect x='{left}' y='{y}' width='{wi:.1f}' height='20' rx='3' "
                     f"fill='{IDLE}'><title>idle ${idle / 1e6:,.2f}</title></rect>")
        parts.append(f"<text x='{left + w + 8:.1f}' y='{y + 15}' fill='#374151'>"
                     f"{_money(cost / 1e6)} · <tspan fill='{IDLE}' font-weight='600'>"
                     f"{share:.0%} idle</tspan></text>")
    parts.append("</svg>")
    return "".join(parts)


def top_idle_bars(rows: Sequence[tuple[str, str, int]], *, width: int = 860) -> str:
    """(label, sublabel, idle cost) as a ranked bar list."""
    rows = list(rows)
    height = 16 + 34 * max(len(rows), 1)
    left, right = 260, 90
    plot_w = width - left - right
    peak = max((v for _, _, v in rows), default=0) or 1
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' "
             f"role='img' aria-label='Top idle instances' {FONT} font-size='12'>"]
    for i, (label, sub, value) in enumerate(rows):
        y = 8 + i * 34
        parts.append(f"<text x='0' y='{y + 12}' fill='#111827' font-weight='600'>"
                     f"{escape(label[:34])}</text>")
        parts.append(f"<text x='0' y='{y + 26}' fill='#6b7280' font-size='11'>"
                     f"{escape(sub[:44])}</text>")
        w = plot_w * value / peak
        parts.append(f"<rect x='{left}' y='{y + 4}' width='{w:.1f}' height='18' rx='3' "
                     f"fill='{IDLE}' opacity='0.85'/>")
        parts.append(f"<text x='{left + w + 8:.1f}' y='{y + 17}' fill='#374151'>"
                     f"${value / 1e6:,.2f}</text>")
    if not rows:
        parts.append("<text x='0' y='24' fill='#6b7280'>No idle GPU time in this period.</text>")
    parts.append("</svg>")
    return "".join(parts)


def _nice(value: float) -> float:
    """A round axis maximum at or above `value`."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** (len(str(int(value))) - 1)
    for step in (1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6, 8, 10):
        if step * magnitude >= value:
            return float(step * magnitude)
    return float(10 * magnitude)


def percent_lines(series: Mapping[str, Sequence[tuple[datetime, float]]], since: datetime,
                  until: datetime, *, width: int = 860, height: int = 180) -> str:
    """Lines of 0-100% over [since, until): one colour per series (SM activity, VRAM)."""
    left, right, pad_top, bottom = 44, 150, 10, 28
    plot_w, plot_h = width - left - right, height - pad_top - bottom
    span = max((until - since).total_seconds(), 1.0)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' "
             f"role='img' aria-label='GPU activity' {FONT} font-size='11'>"]
    for pct in (0, 50, 100):
        y = pad_top + plot_h - plot_h * pct / 100
        parts.append(f"<line x1='{left}' x2='{left + plot_w}' y1='{y:.1f}' y2='{y:.1f}' "
                     "stroke='#e5e7eb'/>")
        parts.append(f"<text x='{left - 6}' y='{y + 4:.1f}' text-anchor='end' "
                     f"fill='#6b7280'>{pct}%</text>")
    for frac in (0.0, 0.5, 1.0):
        at = since + (until - since) * frac
        parts.append(f"<text x='{left + plot_w * frac:.1f}' y='{height - 8}' "
                     f"text-anchor='middle' fill='#6b7280'>{at:%b %d %H:%M}</text>")
    for k, (name, points) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        coords = " ".join(
            f"{left + plot_w * (t - since).total_seconds() / span:.1f},"
            f"{pad_top + plot_h - plot_h * min(max(v, 0.0), 100.0) / 100:.1f}"
            for t, v in sorted(points))
        if coords:
            parts.append(f"<polyline fill='none' stroke='{colour}' stroke-width='1.5' "
                         f"points='{coords}'><title>{escape(name)}</title></polyline>")
        y = pad_top + 6 + k * 20
        parts.append(f"<rect x='{width - right + 16}' y='{y}' width='12' height='12' rx='2' "
                     f"fill='{colour}'/>")
        parts.append(f"<text x='{width - right + 34}' y='{y + 10}' fill='#111827'>"
                     f"{escape(name)}</text>")
    parts.append("</svg>")
    return "".join(parts)
