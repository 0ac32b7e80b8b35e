"""The hourly history: per GPU and hour, what the hour's readings add up to, kept long after
the raw minutes are pruned (`costguard.store.compact` writes it as it folds an hour).

Per GPU-hour: the minutes covered and who measured them, and the minutes any of the
instance's GPUs was read in; for SM activity and utilization
(each minute's peak and mean as the idle classifier picks them), the minutes that carry
the signal, the sum of the means, the largest peak, and a fixed histogram of the means and
of the peaks; VRAM peak and size; tensor, DRAM, power: minutes, sum, peak; the host's CPU
(minutes, sum, peak, histogram), iowait and pegged cores (minutes, sum), its vCPUs and
memory peak; the most GPU processes seen. Sums count a reading once for each minute it
spans, and a reading counts in the hour it begins.

The histograms' buckets are 1 percentage point wide up to 5 % (where idle thresholds sit)
and 5 points wide above: a count of minutes at or above any edge is exact, and so is a
percentile over any span of hours to within its bucket's width. Values are kept on the
readings' grid (`costguard.store.blocks`): sums and peaks exactly as the minutes held them.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from costguard.store.blocks import (
    VALUE_FIELDS,
    Entry,
    compress_bytes,
    decoded,
    pack_ints,
    quantize,
    unpack_ints,
)

EDGES: tuple[float, ...] = (0.0, 1.0, 2.0, 3.0, 4.0, *(float(x) for x in range(5, 100, 5)))
BUCKETS = len(EDGES)  # bucket i holds [EDGES[i], EDGES[i + 1]); the last, [95, 100]
HISTOGRAMS = ("sm_mean", "sm_peak", "util_mean", "util_peak", "host_cpu")
_PCT = 100  # sums and peaks of percentages and watts kept in hundredths
# (name, the reading's field, how: "sum" = minutes + sum + peak, "peak", "avg" = minutes + sum)
_MEASURES = (
    ("tensor", "tensor_mean", "sum"), ("dram", "dram_bw_mean", "sum"),
    ("power", "power_w_mean", "sum"), ("cpu", "host_cpu_pct", "sum"),
    ("iowait", "host_iowait_pct", "avg"), ("hot", "host_hot_cores", "avg"),
    ("vram_peak", "mem_used_bytes", "peak"), ("vram_total", "mem_total_bytes", "peak"),
    ("host_cpus", "host_cpus", "peak"), ("host_mem_peak", "host_mem_used_bytes", "peak"),
    ("host_mem_total", "host_mem_total_bytes", "peak"), ("procs_peak", "process_count", "peak"),
)
_AT = {name: i for i, name in enumerate(VALUE_FIELDS)}
_SIGNALS = (("sm", ("sm_max", "sm_p95", "sm_mean")),
            ("util", ("util_max", "util_p95", "util_mean")))


def _stat_names() -> tuple[str, ...]:
    # cells: the minutes of the hour any of the instance's GPUs has a reading for (the
    # same on each of its GPU-hours: the hours the instance ran, as the verdicts count them)
    names = ["minutes", "sources", "cells"]
    for sig, _ in _SIGNALS:
        names += [f"{sig}_minutes", f"{sig}_sum", f"{sig}_peak"]
    for name, _, how in _MEASURES:
        names += ([name] if how == "peak" else [f"{name}_minutes", f"{name}_sum"]
                  + ([f"{name}_peak"] if how == "sum" else []))
    return tuple(names)


STATS = _stat_names()
_FLOAT_FIELDS = frozenset({"tensor_mean", "dram_bw_mean", "power_w_mean", "host_cpu_pct",
                           "host_iowait_pct"})
_FRACTIONAL = frozenset(
    [f"{sig}_{k}" for sig, _ in _SIGNALS for k in ("sum", "peak")]
    + [f"{name}_{k}" for name, column, _ in _MEASURES if column in _FLOAT_FIELDS
       for k in ("sum", "peak")])


@dataclass
class GpuHour:
    """One GPU's hour. `stats` by `STATS` name (None: nothing measured it); fractional ones
    in hundredths (`value`); `hists` by `HISTOGRAMS` name, minutes per bucket."""

    gpu_index: int
    stats: dict[str, int | None] = field(default_factory=dict)
    hists: dict[str, list[int]] = field(default_factory=dict)

    def value(self, name: str) -> float | None:
        """A statistic in its reading's unit (a percentage, watts, bytes, a count)."""
        raw = self.stats.get(name)
        if raw is None:
            return None
        return raw / _PCT if name in _FRACTIONAL else float(raw)

    def mean(self, name: str) -> float | None:
        """The minute-weighted mean of a summed measure (`sm`, `util`, `cpu`...)."""
        minutes, total = self.stats.get(f"{name}_minutes"), self.stats.get(f"{name}_sum")
        if not minutes or total is None:
            return None
        return total / _PCT / minutes


def bucket(value: float) -> int:
    return max(0, min(BUCKETS - 1, bisect_right(EDGES, value) - 1))


def _hundredths(value: float) -> int:
    return quantize(value, _PCT)


def summarize(entries: Sequence[Entry]) -> list[GpuHour]:
    """The GPU-hours of one instance-hour's readings (a block's entries)."""
    by_gpu: dict[int, list[Entry]] = {}
    covered: set[int] = set()
    for e in entries:
        by_gpu.setdefault(e[0], []).append(e)
        covered.update(range(e[1], e[1] + e[2]))
    out = [_gpu_hour(gpu, rows) for gpu, rows in sorted(by_gpu.items())]
    for hour in out:
        hour.stats["cells"] = len(covered)
    return out


def _gpu_hour(gpu: int, rows: list[Entry]) -> GpuHour:
    out = GpuHour(gpu, hists={name: [0] * BUCKETS for name in HISTOGRAMS})
    stats = out.stats
    stats["minutes"] = sum(e[2] for e in rows)
    sources = 0
    for e in rows:
        sources |= 1 << e[3]
    stats["sources"] = sources
    for sig, fields in _SIGNALS:
        top, p95, avg = (_AT[f] for f in fields)
        n = total = 0
        peak: int | None = None
        mean_hist, peak_hist = out.hists[f"{sig}_mean"], out.hists[f"{sig}_peak"]
        for e in rows:
            v = e[4]
            hi = v[top] if v[top] is not None else v[p95] if v[p95] is not None else v[avg]
            if hi is None:
                continue
            lo = v[avg] if v[avg] is not None else v[p95] if v[p95] is not None else v[top]
            span = e[2]
            n += span
            total += _hundredths(lo) * span
            q = _hundredths(hi)
            peak = q if peak is None or q > peak else peak
            mean_hist[bucket(lo)] += span
            peak_hist[bucket(hi)] += span
        stats.update({f"{sig}_minutes": n, f"{sig}_sum": total if n else None,
                      f"{sig}_peak": peak})
    cpu_hist = out.hists["host_cpu"]
    for name, column, how in _MEASURES:
        at = _AT[column]
        present = [(e[4][at], e[2]) for e in rows if e[4][at] is not None]
        fractional = how != "peak" and column in _FLOAT_FIELDS
        if how == "peak":
            stats[name] = max((int(v) for v, _ in present), default=None)
            continue
        scaled = [(_hundredths(v) if fractional else int(v), span) for v, span in present]
        n = sum(span for _, span in scaled)
        stats[f"{name}_minutes"] = n
        stats[f"{name}_sum"] = sum(v * span for v, span in scaled) if n else None
        if how == "sum":
            stats[f"{name}_peak"] = max((v for v, _ in scaled), default=None)
        if name == "cpu":
            for v, span in present:
                cpu_hist[bucket(v)] += span
    return out


_HIST_CELLS = len(HISTOGRAMS) * BUCKETS


_NONE = -1  # a statistic nothing measured (every statistic is 0 or more)
_MOST = 2**62


def encode(hours: Sequence[GpuHour]) -> bytes:
    """One instance-hour's GPU-hours as a blob: the GPU index and the statistics as one
    matrix of integers (column by column, -1 where nothing measured one), zig-zag deltas
    with their bytes shuffled; then the histograms' counts, shuffled. One array a blob, not
    one a statistic: a GPU-hour decodes in a few microseconds."""
    rows = len(hours)
    if rows == 0:
        raise ValueError("an hour of history holds at least one GPU")
    flat = [h.gpu_index for h in hours]
    for name in STATS:
        flat += [_NONE if (v := h.stats.get(name)) is None else max(0, min(_MOST, v))
                 for h in hours]
    counts = array("I", (min(c, 2**32 - 1) for h in hours for name in HISTOGRAMS
                         for c in h.hists[name]))
    raw = counts.tobytes()
    shuffled = b"".join(raw[i::4] for i in range(4))
    return compress_bytes(struct.pack("<I", rows) + pack_ints(flat) + shuffled, small=True)


def decode(blob: bytes) -> list[GpuHour]:
    """An instance-hour's GPU-hours; ValueError for a blob that is not a whole one."""
    return decoded(blob, _decode, "an hour of history")


def _decode(raw: bytes) -> list[GpuHour]:
    (rows,) = struct.unpack_from("<I", raw)
    width = 1 + len(STATS)
    values = rows * width
    cells = rows * _HIST_CELLS
    if not 0 < rows <= 4096 or len(raw) != 4 + 8 * values + 4 * cells:
        raise ValueError("an hour of history has the wrong length for its GPUs")
    flat = unpack_ints(raw[4:4 + 8 * values], values)
    at = 4 + 8 * values
    plain = bytearray(4 * cells)
    for i in range(4):
        plain[i::4] = raw[at + i * cells:at + (i + 1) * cells]
    counts = array("I")
    counts.frombytes(bytes(plain))
    out = []
    for r in range(rows):
        column = flat[r::rows]  # this GPU's index, then its statistics in STATS order
        hour = GpuHour(column[0], stats={name: None if v < 0 else v
                                         for name, v in zip(STATS, column[1:], strict=True)})
        base = r * _HIST_CELLS
        for k, name in enumerate(HISTOGRAMS):
            start = base + k * BUCKETS
            hour.hists[name] = list(counts[start:start + BUCKETS])
        out.append(hour)
    return out
