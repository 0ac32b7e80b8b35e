"""The efficiency verdict from the hourly history (`costguard.store.hours`): what judges a
window that reaches past the raw minutes kept (`accounting.readings_raw`), a month or a
quarter, at the cost of a row per instance-hour instead of a reading per GPU-minute.

The same rules as `costguard.telemetry.efficiency.judge`, on sums and histograms: coverage,
the signal (SM activity where it covers), the GPUs used (minutes whose peak reached
`recommend.below`: exact where `below` is a histogram edge, 1-5 % by one point or a
multiple of 5; otherwise counted from the edge below it, which only ever finds more use),
the signal's mean, VRAM peak, the host's CPU p95 (the histogram's bucket, exact against a
threshold on an edge, as `cpu_high`'s 75 %), iowait, pegged cores and memory. A window is
counted in whole hours: from the first hour that begins in it. The VRAM p99 is not kept
hour by hour, so a verdict from history gives the peak alone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlmodel import Session

from costguard.model import GpuSignal
from costguard.recommend.settings import RecommendSettings
from costguard.store import blocks
from costguard.store.compact import BLOCKS, HOURS, SERIES, hour_of, hour_start
from costguard.store.hours import BUCKETS, EDGES, GpuHour, summarize
from costguard.store.hours import decode as decode_hours
from costguard.store.readings import read_rows
from costguard.store.refs import InstanceRef
from costguard.store.tables import GpuReadingRow
from costguard.telemetry.efficiency import (
    HOST,
    Bottleneck,
    Efficiency,
    Words,
    conclude,
    none_used,
    too_little,
)

Hours = list[tuple[int, list[GpuHour]]]  # (hour, the instance's GPU-hours in it)
_READING_FIELDS = ("gpu_index", "minute", "span_minutes", "source", *blocks.VALUE_FIELDS)
_IN_CHUNK = 500
_TICK = timedelta(microseconds=1)
_PCT = 100  # GpuHour sums are in hundredths


def history_reaches_further(session: Session, start: datetime) -> bool:
    """Whether a window from `start` needs the history: it begins before the oldest raw
    minute kept, and the history goes back further than that."""
    oldest_history = session.execute(select(func.min(HOURS.c.hour))).scalar_one_or_none()
    if oldest_history is None:
        return False
    raw: list[int] = []
    oldest_block = session.execute(select(func.min(BLOCKS.c.hour))).scalar_one_or_none()
    if oldest_block is not None:
        raw.append(int(oldest_block))
    oldest_row = session.execute(select(func.min(GpuReadingRow.minute))).scalar_one_or_none()
    if oldest_row is not None:
        raw.append(hour_of(oldest_row))
    oldest_raw = min(raw, default=None)
    if oldest_raw is None:
        return True
    return int(oldest_history) < oldest_raw and start < hour_start(oldest_raw)


def read_hours(session: Session, refs: Iterable[InstanceRef], start: datetime,
               end: datetime) -> dict[InstanceRef, Hours]:
    """The GPU-hours of each instance over the whole hours of [start, end): the history's
    rows, and for the hours not settled yet, their readings in `gpu_readings` summed the
    same way."""
    first = hour_of(start) if hour_start(hour_of(start)) == start else hour_of(start) + 1
    last = hour_of(end - _TICK)
    out: dict[InstanceRef, dict[int, list[GpuHour]]] = defaultdict(dict)
    by_provider: dict[str, list[str]] = defaultdict(list)
    for provider, iid in set(refs):
        by_provider[provider].append(iid)
    for provider, ids in by_provider.items():
        ids.sort()
        for at in range(0, len(ids), _IN_CHUNK):
            rows = session.execute(select(SERIES.c.instance_id, HOURS.c.hour, HOURS.c.payload)
                                   .join(HOURS, HOURS.c.series_id == SERIES.c.id).where(
                SERIES.c.provider == provider, SERIES.c.instance_id.in_(ids[at:at + _IN_CHUNK]),
                HOURS.c.hour.between(first, last)))
            for iid, hour, payload in rows:
                try:
                    out[(provider, str(iid))][int(hour)] = decode_hours(bytes(payload))
                except ValueError:
                    continue  # an unreadable hour is an hour without readings
    pending: dict[tuple[InstanceRef, int], list[blocks.Entry]] = defaultdict(list)
    for ref, values in read_rows(session, [(p, i) for p, ids in by_provider.items()
                                           for i in ids],
                                 hour_start(first), end, spanning=False,
                                 fields=_READING_FIELDS, settled=False):
        gpu, minute, span, source, *rest = values
        stamp = int(minute.timestamp()) // 60
        hour = stamp // 60
        if hour in out.get(ref, {}) or source not in blocks.SOURCES:
            continue  # settled (a late reading is merged at the next prune), or unknown
        pending[(ref, hour)].append((int(gpu), stamp % 60, int(span),
                                     blocks.source_code(source), tuple(rest)))
    for (ref, hour), entries in pending.items():
        entries.sort(key=lambda e: (e[0], e[1]))
        out[ref][hour] = summarize(entries)
    return {ref: sorted(hours.items()) for ref, hours in out.items()}


def judge_hours(hours: Hours, *, window_start: datetime, window_end: datetime,
                gpu_count: int, settings: RecommendSettings | None = None,
                words: Words | None = None) -> Efficiency:
    """The verdict for one instance's GPU-hours over [window_start, window_end)."""
    cfg = settings or RecommendSettings()
    cells = [(hour, max(h.stats.get("cells") or 0 for h in gpus)) for hour, gpus in hours
             if gpus]
    ran = sum(n for _, n in cells)
    hours_ran = ran / 60
    span = 0.0
    if began := next(((hour, n) for hour, n in cells if n), None):
        # the first reading's minute is not kept: its hour's minutes with readings end the
        # hour (an instance launched at 10:37 has 23): exact for an instance that ran on
        # from its first reading, as raw minutes' span (`judge`) counts it
        first = max(window_start, hour_start(began[0]) + timedelta(minutes=60 - began[1]))
        span = (window_end - first).total_seconds() / 3600
    base: dict[str, object] = {
        "window_start": window_start, "window_end": window_end, "hours": round(hours_ran, 2),
        "span_hours": round(span, 2), "gpus_paid": gpu_count}
    if gpu_count <= 0 or not ran:
        why = "no GPUs" if gpu_count <= 0 else "no readings in the window"
        return Efficiency(bottleneck=Bottleneck.INSUFFICIENT_DATA, underused=False,
                          evidence=(why,), coverage=0.0, **base)
    expected = gpu_count * ran
    per_gpu = _per_gpu(hours, gpu_count)
    signal, sig = GpuSignal.SM_ACTIVE, "sm"
    if sum(g.minutes["sm"] for g in per_gpu.values()) < cfg.min_coverage * expected:
        signal, sig = GpuSignal.UTIL_GPU, "util"
    filled = sum(g.minutes[sig] for g in per_gpu.values())
    coverage = round(filled / expected, 4)
    base.update(coverage=coverage, signal=signal)
    thin = too_little(cfg, signal, coverage, expected, hours_ran, base)
    if thin is not None:
        return thin
    edge = max(b for b in range(BUCKETS) if EDGES[b] <= cfg.below)
    used = tuple(sorted(
        g for g, acc in per_gpu.items() if acc.minutes[sig]
        and sum(acc.peaks[sig][edge:]) >= max(1, math.ceil(cfg.used_share * acc.minutes[sig]))))
    paid = sum(acc.sums[sig] for acc in per_gpu.values()) / _PCT / (100 * expected)
    vram = [v for g in used if (v := per_gpu[g].vram_peak) is not None]
    totals = [t for _, gpus in hours for h in gpus if (t := h.stats.get("vram_total"))]
    found = Efficiency(bottleneck=Bottleneck.IDLE, underused=False, evidence=(),
                       gpus_used=len(used), used_gpus=used, paid_active_share=round(paid, 4),
                       vram_peak_bytes=max(vram) if vram else None,
                       vram_total_bytes=max(totals) if totals else None,
                       **_host(hours, ran, cfg.min_coverage),
                       **base)
    if not used:
        return found.model_copy(update={"evidence": (none_used(cfg, signal, hours_ran),)})
    gpu_mean = (sum(per_gpu[g].sums[sig] for g in used) / _PCT
                / sum(per_gpu[g].minutes[sig] for g in used))
    return conclude(found, gpu_mean, gpu_count, cfg, words or HOST)


class _Gpu:
    """One GPU's sums over the window's hours, per signal."""

    __slots__ = ("minutes", "peaks", "sums", "vram_peak")

    def __init__(self) -> None:
        self.minutes = {"sm": 0, "util": 0}
        self.sums = {"sm": 0, "util": 0}
        self.peaks = {"sm": [0] * BUCKETS, "util": [0] * BUCKETS}
        self.vram_peak: int | None = None


def _per_gpu(hours: Hours, gpu_count: int) -> dict[int, _Gpu]:
    out: dict[int, _Gpu] = {}
    for _, gpus in hours:
        cells = max((h.stats.get("cells") or 0 for h in gpus), default=0)
        for h in gpus:
            if h.gpu_index >= gpu_count:
                continue
            acc = out.setdefault(h.gpu_index, _Gpu())
            for sig in ("sm", "util"):
                n = h.stats.get(f"{sig}_minutes") or 0
                if not n:
                    continue
                acc.minutes[sig] += min(n, cells)  # a minute read twice is one minute
                acc.sums[sig] += h.stats.get(f"{sig}_sum") or 0
                peaks = acc.peaks[sig]
                for b, count in enumerate(h.hists[f"{sig}_peak"]):
                    peaks[b] += count
            peak = h.stats.get("vram_peak")
            if peak is not None and (acc.vram_peak is None or peak > acc.vram_peak):
                acc.vram_peak = peak
    return {g: acc for g, acc in out.items() if acc.minutes["sm"] or acc.minutes["util"]}


def _host(hours: Hours, ran: int, min_coverage: float) -> dict[str, object]:
    """The host's figures: each hour's from the GPU-hour that read the host most (its GPUs
    repeat the host's figures); None unless host CPU covers `min_coverage` of `ran`."""
    rows = [max(gpus, key=lambda h: h.stats.get("cpu_minutes") or 0) for _, gpus in hours
            if gpus]
    cpu_minutes = sum(h.stats.get("cpu_minutes") or 0 for h in rows)
    if not cpu_minutes or cpu_minutes < min_coverage * ran:
        return {}
    hist = [0] * BUCKETS
    for h in rows:
        for b, count in enumerate(h.hists["host_cpu"]):
            hist[b] += count
    rank = max(1, math.ceil(0.95 * sum(hist)))
    seen, p95 = 0, EDGES[-1]
    for b, count in enumerate(hist):
        seen += count
        if seen >= rank:
            p95 = EDGES[b]
            break

    def mean(name: str, digits: int) -> float | None:
        n = sum(h.stats.get(f"{name}_minutes") or 0 for h in rows)
        total = sum(h.stats.get(f"{name}_sum") or 0 for h in rows)
        scale = _PCT if name in ("cpu", "iowait") else 1
        return round(total / scale / n, digits) if n else None

    def peak(name: str) -> int | None:
        values = [h.stats[name] for h in rows if h.stats.get(name) is not None]
        return max(values) if values else None  # type: ignore[type-var]

    return {"host_cpu_p95": p95, "host_cpu_mean": mean("cpu", 3),
            "host_iowait_mean": mean("iowait", 3), "host_hot_cores": mean("hot", 2),
            "host_cpus": peak("host_cpus"), "host_mem_peak_bytes": peak("host_mem_peak"),
            "host_mem_total_bytes": peak("host_mem_total")}


def judge_many(session: Session, instances: Sequence[tuple[InstanceRef, int, Words | None]],
               start: datetime, end: datetime, cfg: RecommendSettings, *, batch: int = 50
               ) -> dict[InstanceRef, Efficiency]:
    """The verdicts of `instances` (ref, GPU count, words) from their hours, read `batch`
    instances at a time (a quarter of an 8-GPU host's hours is ~17,000 GPU-hours, ~3 KB
    each as objects)."""
    out: dict[InstanceRef, Efficiency] = {}
    for at in range(0, len(instances), batch):
        part = instances[at:at + batch]
        got = read_hours(session, [ref for ref, _, _ in part], start, end)
        out.update({ref: judge_hours(got.get(ref, []), window_start=start, window_end=end,
                                     gpu_count=count, settings=cfg, words=words)
                    for ref, count, words in part})
    return out
