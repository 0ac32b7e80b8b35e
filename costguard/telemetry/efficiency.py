"""The efficiency verdict: how much of what an instance pays for its GPUs does work, and
what holds the rest back.

Over a window (7 days by default) of the readings an instance sent while it ran:

* GPUs used: a GPU whose signal (SM activity where it covers, else util_gpu, as the idle
  classifier chooses) reached the idle threshold in at least `used_share` of its minutes
  (1%: a blip is not use, a job of two hours in a week is).
* The signal's mean on the GPUs used, and the active share of the paid GPU-minutes.
* VRAM per GPU: the minute maxima's p99 and maximum, over the GPUs used.
* The host: CPU busy (p95 over minutes), iowait (mean), pegged cores, memory peak.

The bottleneck, from the field's own table (GPU mean on the GPUs used vs. host CPU):

    GPU low  + CPU high -> data-loading    (more CPU per GPU, not a smaller GPU)
    GPU low  + CPU low  -> latency-bound   (batch too small, or serving sparse requests)
    GPU high + CPU low  -> healthy, or unused-gpus when some paid GPUs did no work (the
                           busy one of a p4d's eight is not a healthy instance)
    GPU high + CPU high -> saturated       (needs more hardware, not less)
    GPU low, host never measured -> cause-unknown (run the agent: it reads /proc)

and `idle` when no GPU was used, `insufficient-data` when the readings cover less than
`min_coverage` of the GPU-minutes of the hours the instance reported, or fewer than
`min_hours` of them: never a guess. `underused`: some paid GPUs unused, or the GPUs used
low. Thresholds: `costguard.recommend.settings`. Documented in docs/recommend.md.
"""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import NamedTuple, Protocol

from costguard.clock import utc
from costguard.minutes import Reading, covering
from costguard.model import GpuSignal, SharesFieldsSet, TelemetrySource
from costguard.recommend.settings import RecommendSettings
from costguard.telemetry.classify import LABEL, gb, pct, sm_reading, util_reading
from costguard.telemetry.summary import percentile


class Bottleneck(StrEnum):
    HEALTHY = "healthy"
    UNUSED_GPUS = "unused-gpus"
    SATURATED = "saturated"
    DATA_LOADING = "data-loading"
    LATENCY_BOUND = "latency-bound"
    CAUSE_UNKNOWN = "cause-unknown"
    IDLE = "idle"
    INSUFFICIENT_DATA = "insufficient-data"


ADVICE = {
    Bottleneck.HEALTHY: "the GPUs used are busy: keep them",
    Bottleneck.UNUSED_GPUS: "the GPUs used are busy, but some paid GPUs did no work: a type "
                            "with fewer GPUs that holds the work measured",
    Bottleneck.SATURATED: "GPU and CPU both busy: this job needs more hardware, not less",
    Bottleneck.DATA_LOADING: "the GPU waits for its data: give it more CPU per GPU (more "
                             "loader workers, a type with more vCPUs, or fewer GPUs), not a "
                             "smaller GPU",
    Bottleneck.LATENCY_BOUND: "GPU and CPU both mostly waiting: a batch too small or a "
                              "latency-bound server; a smaller GPU serves it",
    Bottleneck.CAUSE_UNKNOWN: "GPU low, and no host CPU reading to say why: run the agent "
                              "(it reads /proc) before changing hardware",
    Bottleneck.IDLE: "no GPU did work: the idle policy's case",
    Bottleneck.INSUFFICIENT_DATA: "not enough readings to judge: no data is not underused",
}


@dataclass(frozen=True)
class Words:
    """What the evidence calls the machine its CPU figures measured, and its advice."""

    host: str = "host"
    cores: str = "vCPUs"
    advice: Mapping[Bottleneck, str] = field(default_factory=lambda: ADVICE)
    unit: str = "GPU"  # one accelerator: "GPU", "TPU chip"
    memory: str = "VRAM"  # its memory: "VRAM", "HBM"


HOST = Words()


class Efficiency(SharesFieldsSet):
    """One instance's verdict over a window, with the numbers behind it (frozen, as
    `SharesFieldsSet` is)."""

    bottleneck: Bottleneck
    underused: bool
    evidence: tuple[str, ...]
    window_start: datetime
    window_end: datetime
    hours: float  # hours with readings (the instance ran) in the window
    # hours from its first reading in the window to the window's end: hours / span_hours
    # is the share of its time it ran (a fleet watched for two days is not part-time)
    span_hours: float = 0.0
    coverage: float
    signal: GpuSignal | None = None
    gpus_paid: int
    gpus_used: int | None = None
    used_gpus: tuple[int, ...] = ()
    gpu_mean: float | None = None  # the signal's mean on the GPUs used, percent
    paid_active_share: float | None = None  # signal mean over all paid GPU-minutes, 0-1
    vram_peak_bytes: int | None = None  # the largest on any GPU used
    vram_p99_bytes: int | None = None
    vram_total_bytes: int | None = None  # one GPU's memory
    host_cpu_p95: float | None = None
    host_cpu_mean: float | None = None
    host_iowait_mean: float | None = None
    host_cpus: int | None = None
    host_hot_cores: float | None = None  # mean cores pegged per minute
    host_mem_peak_bytes: int | None = None
    host_mem_total_bytes: int | None = None

    @property
    def advice(self) -> str:
        return ADVICE[self.bottleneck]


class Judged(Reading, Protocol):
    """What the verdict reads of a GPU-minute: the idle classifier's fields (`Reading`), one
    GPU's memory and the host's figures. A `GpuMinute`, or a stored reading read for judging
    (`JudgedRow`, a plain tuple: a week of a fleet's minutes judged)."""

    @property
    def mem_total_bytes(self) -> int | None: ...
    @property
    def host_cpu_pct(self) -> float | None: ...
    @property
    def host_iowait_pct(self) -> float | None: ...
    @property
    def host_cpus(self) -> int | None: ...
    @property
    def host_hot_cores(self) -> int | None: ...
    @property
    def host_mem_used_bytes(self) -> int | None: ...
    @property
    def host_mem_total_bytes(self) -> int | None: ...


class JudgedRow(NamedTuple):
    """A stored GPU-minute as the verdict reads it (`Judged`), read without a model
    (`store.readings.read_shaped`)."""

    gpu_index: int
    minute: datetime
    span_minutes: int
    source: TelemetrySource
    util_mean: float | None
    util_p95: float | None
    util_max: float | None
    sm_mean: float | None
    sm_p95: float | None
    sm_max: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    process_count: int | None
    top_process_pid: int | None
    top_process_bytes: int | None
    host_cpu_pct: float | None
    host_iowait_pct: float | None
    host_cpus: int | None
    host_hot_cores: int | None
    host_mem_used_bytes: int | None
    host_mem_total_bytes: int | None


_US = timedelta(microseconds=1)
_MINUTE_US = 60_000_000
# one GPU's minute: the chosen signal's mean and peak, and VRAM (None: not measured)
Slot = tuple[float, float, int | None]


class _Placed(NamedTuple):
    """The window's cells the readings stand for, flat: cell n is `cells[n]` (microseconds
    from the window's start) of reading `owner[n]` (its index in `readings`), in reading
    order. Two arrays of machine integers: a week of a host's minutes is no object per
    cell for the garbage collector to walk."""

    readings: Sequence[Judged]
    cells: array[int]
    owner: array[int]
    per_cell: int  # the minutes a cell stands for


def _placed(inside: Sequence[Judged], start: datetime, end: datetime, step: int) -> _Placed:
    """The cells each reading stands for. A cell is a minute (a reading of several minutes
    stands for each), or, where every reading spans `step` minutes wholly inside the window
    (a cluster read at 5-60 minute steps), one cell per reading. Every count, share, mean and
    nearest-rank percentile is the same either way (each value would repeat `step` times);
    the second is `step` times less work. Cells are whole microseconds from `start`, as
    exact as the minutes they stand for, and far cheaper to hash."""
    width = (end - start) // _US
    offsets: dict[datetime, int] = {}  # each minute's once: an instance's GPUs share them
    at = array("q")
    for m in inside:
        t = offsets.get(m.minute)
        if t is None:
            t = offsets[m.minute] = (m.minute - start) // _US
        at.append(t)
    if step > 1 and all(m.span_minutes == step and 0 <= t <= width - step * _MINUTE_US
                        for t, m in zip(at, inside, strict=True)):
        return _Placed(inside, at, array("q", range(len(at))), step)
    cells, owner = array("q"), array("q")
    for n, (t, m) in enumerate(zip(at, inside, strict=True)):
        span = m.span_minutes
        if span == 1:
            if 0 <= t < width:
                cells.append(t)
                owner.append(n)
            continue
        these: Sequence[int] = range(t, t + span * _MINUTE_US, _MINUTE_US)
        if not (t >= 0 and t + (span - 1) * _MINUTE_US < width):  # not wholly inside
            these = [c for c in these if 0 <= c < width]
        cells.extend(these)
        owner.extend([n] * len(these))
    return _Placed(inside, cells, owner, 1)


def _slots(placed: _Placed, sm: bool, gpu_count: int) -> dict[int, dict[int, Slot]]:
    """Each GPU's minutes (cells) of SM activity (`sm`) or utilization: a later reading of
    the same minute replaces an earlier one."""
    slots: list[tuple[int, Slot] | None] = []
    for m in placed.readings:
        value = sm_reading(m) if sm else util_reading(m)
        slots.append(None if value is None or m.gpu_index >= gpu_count else
                     (m.gpu_index, (value[1], value[0], m.mem_used_bytes)))
    out: dict[int, dict[int, Slot]] = defaultdict(dict)
    for cell, n in zip(placed.cells, placed.owner, strict=True):
        if (slot := slots[n]) is not None:
            out[slot[0]][cell] = slot[1]
    return out


def judge(minutes: Sequence[Judged], *, window_start: datetime, window_end: datetime,
          gpu_count: int, settings: RecommendSettings | None = None,
          words: Words | None = None, step_minutes: int = 1) -> Efficiency:
    """The verdict for one instance's readings over [window_start, window_end), its
    evidence in `words` (an instance's by default; a pod's in k8s/underused.py).
    `step_minutes`: the span of readings taken at fixed steps (see `_placed`)."""
    cfg = settings or RecommendSettings()
    start, end = utc(window_start), utc(window_end)
    placed = _placed(covering(minutes, start, end), start, end, step_minutes)
    per_cell, ran = placed.per_cell, set(placed.cells)
    hours = len(ran) * per_cell / 60
    span = ((end - start) // _US - min(ran)) / 10**6 / 3600 if ran else 0.0
    base = {"window_start": start, "window_end": end, "hours": round(hours, 2),
            "span_hours": round(span, 2), "gpus_paid": gpu_count}
    if gpu_count <= 0 or not ran:
        why = "no GPUs" if gpu_count <= 0 else "no readings in the window"
        return Efficiency(bottleneck=Bottleneck.INSUFFICIENT_DATA, underused=False,
                          evidence=(why,), coverage=0.0, **base)
    expected = gpu_count * len(ran)
    sm = _slots(placed, True, gpu_count)
    signal, by_gpu = GpuSignal.SM_ACTIVE, sm
    if sum(map(len, sm.values())) < cfg.min_coverage * expected:
        signal, by_gpu = GpuSignal.UTIL_GPU, _slots(placed, False, gpu_count)
    filled = sum(map(len, by_gpu.values()))
    coverage = round(filled / expected, 4)
    base.update(coverage=coverage, signal=signal)
    thin = too_little(cfg, signal, coverage, expected * per_cell, hours, base)
    if thin is not None:
        return thin

    below = cfg.below
    used = tuple(sorted(g for g, s in by_gpu.items()
                        if sum(1 for x in s.values() if x[1] >= below)
                        >= max(1, math.ceil(cfg.used_share * len(s)))))
    paid_share = sum(x[0] for s in by_gpu.values() for x in s.values()) / (100 * expected)
    host = _host(placed, len(ran), cfg.min_coverage)
    found = Efficiency(bottleneck=Bottleneck.IDLE, underused=False, evidence=(),
                       gpus_used=len(used), used_gpus=used,
                       paid_active_share=round(paid_share, 4), **host,
                       **_vram(by_gpu, used), **base)
    if not used:
        return found.model_copy(update={"evidence": (none_used(cfg, signal, hours),)})
    gpu_mean = sum(x[0] for g in used for x in by_gpu[g].values()) / sum(
        len(by_gpu[g]) for g in used)
    return conclude(found, gpu_mean, gpu_count, cfg, words or HOST)


def too_little(cfg: RecommendSettings, signal: GpuSignal, coverage: float, minutes: int,
               hours: float, base: dict[str, object]) -> Efficiency | None:
    """`insufficient-data` where the signal covers less than `min_coverage` of the
    `minutes` the GPUs should have been read in, or the readings span too few hours."""
    if coverage >= cfg.min_coverage and hours >= cfg.min_hours:
        return None
    why = (f"{LABEL[signal]} covers {coverage:.0%} of {minutes} GPU-minutes "
           f"(needs {cfg.min_coverage:.0%})" if coverage < cfg.min_coverage else
           f"{hours:.1f} h of readings in the window (needs {cfg.min_hours:g} h)")
    return Efficiency(bottleneck=Bottleneck.INSUFFICIENT_DATA, underused=False,
                      evidence=(why + ": no data is not underused",),
                      **base)


def none_used(cfg: RecommendSettings, signal: GpuSignal, hours: float) -> str:
    return (f"no GPU reached {pct(cfg.below)} {LABEL[signal]} in {cfg.used_share:.0%} of its "
            f"minutes over {hours:.1f} h")


def conclude(found: Efficiency, gpu_mean: float, gpu_count: int, cfg: RecommendSettings,
             words: Words) -> Efficiency:
    """The verdict of a window with GPUs used (`found`: its coverage, GPUs used and host
    figures, bottleneck IDLE so far), given the signal's mean on the GPUs used."""
    used = found.used_gpus
    bottleneck = _bottleneck(gpu_mean < cfg.gpu_low, _cpu_high(found, cfg))
    if bottleneck is Bottleneck.HEALTHY and len(used) < gpu_count:
        bottleneck = Bottleneck.UNUSED_GPUS
    underused = len(used) < gpu_count or gpu_mean < cfg.gpu_low
    found = found.model_copy(update={"gpu_mean": round(gpu_mean, 3), "bottleneck": bottleneck,
                                     "underused": underused})
    return found.model_copy(update={"evidence": _evidence(found, cfg, words)})


def _bottleneck(gpu_low: bool, cpu_high: bool | None) -> Bottleneck:
    if cpu_high is None:
        return Bottleneck.CAUSE_UNKNOWN if gpu_low else Bottleneck.HEALTHY
    if gpu_low:
        return Bottleneck.DATA_LOADING if cpu_high else Bottleneck.LATENCY_BOUND
    return Bottleneck.SATURATED if cpu_high else Bottleneck.HEALTHY


def _cpu_high(e: Efficiency, cfg: RecommendSettings) -> bool | None:
    """Whether the host's CPUs were busy (None: not measured often enough to say)."""
    if e.host_cpu_p95 is None:
        return None
    return e.host_cpu_p95 >= cfg.cpu_high or (e.host_iowait_mean or 0.0) >= cfg.iowait_high


def _vram(by_gpu: dict[int, dict[int, Slot]], used: tuple[int, ...]) -> dict[str, int]:
    values = [x[2] for g in used for x in by_gpu[g].values() if x[2] is not None]
    if not values:
        return {}
    return {"vram_peak_bytes": max(values), "vram_p99_bytes": int(percentile(values, 99))}


def _host(placed: _Placed, ran: int, min_coverage: float) -> dict[str, object]:
    """The host's figures, one per minute (every GPU's summary of a minute carries the same);
    None unless host CPU covers `min_coverage` of the `ran` cells, as GPU coverage must."""
    cpu: dict[int, Judged] = {}
    totals = [m.mem_total_bytes for m in placed.readings if m.mem_total_bytes]
    out: dict[str, object] = {"vram_total_bytes": max(totals)} if totals else {}
    measured = [m if m.host_cpu_pct is not None else None for m in placed.readings]
    for t, n in zip(placed.cells, placed.owner, strict=True):
        if (m := measured[n]) is not None:
            cpu[t] = m
    if len(cpu) < min_coverage * ran:
        return out
    rows = list(cpu.values())
    busy = [m.host_cpu_pct for m in rows if m.host_cpu_pct is not None]
    iowait = [m.host_iowait_pct for m in rows if m.host_iowait_pct is not None]
    hot = [m.host_hot_cores for m in rows if m.host_hot_cores is not None]
    cores = [m.host_cpus for m in rows if m.host_cpus is not None]
    mem = [m.host_mem_used_bytes for m in rows if m.host_mem_used_bytes is not None]
    mem_total = [m.host_mem_total_bytes for m in rows if m.host_mem_total_bytes is not None]
    out.update(host_cpu_p95=percentile(busy, 95), host_cpu_mean=round(sum(busy) / len(busy), 3),
               host_iowait_mean=round(sum(iowait) / len(iowait), 3) if iowait else None,
               host_hot_cores=round(sum(hot) / len(hot), 2) if hot else None,
               host_cpus=max(cores) if cores else None,
               host_mem_peak_bytes=max(mem) if mem else None,
               host_mem_total_bytes=max(mem_total) if mem_total else None)
    return out


def _evidence(e: Efficiency, cfg: RecommendSettings, words: Words) -> tuple[str, ...]:
    unit = words.unit
    label = LABEL[e.signal] if e.signal else unit
    out = [f"{e.gpus_used} of {e.gpus_paid} {unit}s used"
           + (f" ({unit} {', '.join(map(str, e.used_gpus))})" if e.gpus_used != e.gpus_paid
              else "")
           + f" over {e.hours:.1f} h; {label} {pct(e.gpu_mean or 0.0)} mean on the {unit}s "
           f"used, {pct(100 * (e.paid_active_share or 0.0))} of the paid {unit}-hours"]
    if e.vram_peak_bytes is not None:
        of = f" of {gb(e.vram_total_bytes)}" if e.vram_total_bytes else ""
        p99 = "" if e.vram_p99_bytes is None else f" (p99 {gb(e.vram_p99_bytes)})"
        out.append(f"{words.memory} peak {gb(e.vram_peak_bytes)}{of} per {unit}{p99}")
    if e.host_cpu_p95 is not None:
        cores = f" of {e.host_cpus} {words.cores}" if e.host_cpus else ""
        iowait = ("" if e.host_iowait_mean is None
                  else f", iowait {pct(e.host_iowait_mean)}")
        text = (f"{words.host} CPU p95 {pct(e.host_cpu_p95)}{cores} (mean "
                f"{pct(e.host_cpu_mean or 0)}{iowait})")
        if e.host_hot_cores:
            text += f", {e.host_hot_cores:g} cores pegged on average"
        out.append(text)
    else:
        out.append(f"{words.host} CPU not measured")
    if e.host_mem_peak_bytes is not None:
        of = f" of {gb(e.host_mem_total_bytes)}" if e.host_mem_total_bytes else ""
        out.append(f"{words.host} memory peak {gb(e.host_mem_peak_bytes)}{of}")
    gpu = "low" if (e.gpu_mean or 0) < cfg.gpu_low else "high"
    out.append(f"{unit} {gpu} (below {pct(cfg.gpu_low)} is low): "
               f"{words.advice[e.bottleneck]}")
    return tuple(out)
