"""The idle classifier: per-minute GPU summaries over a window -> one honest verdict.

Rules (documented in docs/agent.md, tested on the real H100 recording):

* Coverage first. Expected slots = `gpu_count` x whole minutes in [window_start, window_end)
  (a window shorter than a minute counts as one slot, so 30 s replay windows work). A
  reading that spans several minutes (a cloud metric's period) fills each of them.
  Coverage = distinct (gpu_index, minute) slots that carry the chosen signal / expected,
  where only the instance's own GPU indexes count and a minute is a whole wall minute
  (readings stamped at seconds of one minute fill that one slot): coverage cannot be forged
  by sending many summaries or inventing GPUs.
  Below `min_coverage`, or any GPU silent for the whole window -> NO_DATA:
  no data is not idle.
* Signal. `auto` picks SM activity (NVML GPM / DCGM SM_ACTIVE) when it alone reaches
  `min_coverage`, else `util_gpu`. `util_gpu` counts time in which *any* kernel ran, so a
  loop of trivial kernels reads ~12% on an H100 whose SMs do nothing; SM activity does not.
* IDLE: on every GPU, in every minute, the signal's peak stays below `below`. The peak is
  the minute's max (falling back to p95, then mean, when a source has no max): a p95 would
  hide a 2 s burst inside a minute, and one burst is enough to mean someone used the GPU.
* UNDERUSED: not idle, but the signal's mean over all GPU-minutes is below
  `UNDERUSED_FACTOR` x `below` (10% by default), or more than half the GPUs are idle.
* ACTIVE otherwise (the bursty 2 s-of-10 s load, ~19% mean, is ACTIVE).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal, NamedTuple

from costguard.clock import utc
from costguard.model import Classification, GpuSignal, Reading, Verdict, aware, covering

UNDERUSED_FACTOR = 2.0
SignalChoice = Literal["auto", "sm_active", "util_gpu"]

_MINUTE = timedelta(minutes=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_MINUTE_US = 60_000_000
LABEL = {GpuSignal.SM_ACTIVE: "SM activity", GpuSignal.UTIL_GPU: "util_gpu"}


class _Reading(NamedTuple):
    """The chosen signal of one GPU over one minute, or over each minute a reading spans."""

    gpu: int
    peak: float
    mean: float


def expected_slots(window_start: datetime, window_end: datetime, gpu_count: int) -> int:
    """GPU-minutes a fully reporting instance produces in the window."""
    minutes = max(1, math.floor((window_end - window_start) / _MINUTE))
    return gpu_count * minutes


def _peak_mean(top: float | None, p95: float | None, mean: float | None
               ) -> tuple[float, float] | None:
    """A minute's (peak, mean): the max, else p95, else mean; the mean, else p95, else max."""
    if top is None and p95 is None and mean is None:
        return None
    peak = top if top is not None else p95 if p95 is not None else mean
    avg = mean if mean is not None else p95 if p95 is not None else top
    return peak, avg  # type: ignore[return-value]  # one of the three is set


def sm_reading(m: Reading) -> tuple[float, float] | None:
    return _peak_mean(m.sm_max, m.sm_p95, m.sm_mean)


def util_reading(m: Reading) -> tuple[float, float] | None:
    return _peak_mean(m.util_max, m.util_p95, m.util_mean)


def peaks(minutes: Sequence[Reading]) -> tuple[list[float], list[float]]:
    """Each minute's peak of `util_gpu` and of SM activity, where the minute carries it."""
    util = [v[0] for v in map(util_reading, minutes) if v is not None]
    sm = [v[0] for v in map(sm_reading, minutes) if v is not None]
    return util, sm


def _readings(minutes: Sequence[Reading], pick: Callable[[Reading], tuple[float, float] | None],
              start: datetime, end: datetime, gpu_count: int) -> list[_Reading]:
    """One reading per (GPU, minute) slot of [start, end): a reading spanning several
    minutes fills each of them.

    Coverage counts wall minutes of GPUs the instance has, never more: a reading for a GPU
    index beyond `gpu_count` fills no slot, and readings stamped at seconds within the same
    minute fill that one minute's slot (45 summaries sent within one real minute are one
    minute of data, not 45). `pick` reads the signal of one minute (`sm_reading`,
    `util_reading`).

    A slot is keyed by its instant in microseconds since the epoch: the minutes `slots`
    gives, without building and hashing a datetime per minute of a 5-minute reading (the
    classifier runs for every GPU instance twice a cycle)."""
    start_us, end_us = (start - _EPOCH) // _US, (end - _EPOCH) // _US
    seen: dict[tuple[int, int], _Reading] = {}
    for m in minutes:
        gpu = m.gpu_index
        if gpu >= gpu_count:
            continue
        value = pick(m)
        if value is None:
            continue
        reading = _Reading(gpu, *value)
        at = (m.minute - _EPOCH) // _US
        # a re-sent minute replaces the earlier copy: one slot counts once
        if m.span_minutes == 1:  # its wall minute: the stamp less its seconds
            seen[(gpu, at - m.minute.second * 1_000_000 - m.minute.microsecond)] = reading
        else:
            for t in range(at, at + m.span_minutes * _MINUTE_US, _MINUTE_US):
                if start_us <= t < end_us:
                    seen[(gpu, t)] = reading
    return list(seen.values())


def _coverage(readings: Sequence[_Reading], expected: int) -> float:
    """Filled slots / expected (at least one: `classify` returns before this for 0 GPUs)."""
    return min(1.0, len(readings) / expected)


def classify(
    minutes: Sequence[Reading],
    *,
    window_start: datetime,
    window_end: datetime,
    gpu_count: int,
    signal: Literal["auto", "sm_active", "util_gpu"] = "auto",
    below: float = 5.0,
    min_coverage: float = 0.8,
) -> Classification:
    """Classify one instance's GPUs over [window_start, window_end)."""
    start, end = utc(window_start), utc(window_end)
    if end <= start:
        raise ValueError(f"window_end ({end}) must be after window_start ({start})")
    if gpu_count < 0:
        raise ValueError(f"gpu_count must be >= 0, got {gpu_count}")
    if signal not in ("auto", "sm_active", "util_gpu"):
        raise ValueError(f"signal must be auto, sm_active or util_gpu, got {signal!r}")
    inside = covering(map(aware, minutes), start, end)
    expected = expected_slots(start, end, gpu_count)

    def no_data(evidence: str, used: GpuSignal | None, coverage: float) -> Classification:
        return Classification(
            verdict=Verdict.NO_DATA,
            signal=used,
            evidence=evidence,
            window_start=start,
            window_end=end,
            coverage=coverage,
        )

    if gpu_count == 0:
        return no_data("instance has no GPUs to classify", None, 0.0)

    sm_readings = ([] if signal == "util_gpu"
                   else _readings(inside, sm_reading, start, end, gpu_count))
    if signal == "sm_active" or (
        signal == "auto" and sm_readings and _coverage(sm_readings, expected) >= min_coverage
    ):
        used, readings = GpuSignal.SM_ACTIVE, sm_readings
    else:
        used = GpuSignal.UTIL_GPU
        readings = _readings(inside, util_reading, start, end, gpu_count)

    coverage = _coverage(readings, expected)
    span = _span(start, end)
    if coverage < min_coverage:
        return no_data(
            f"{LABEL[used]} covers {coverage:.0%} of {expected} expected GPU-minutes over "
            f"{span} (needs {min_coverage:.0%}): no data is not idle",
            used,
            coverage,
        )
    by_gpu: dict[int, list[_Reading]] = defaultdict(list)
    for r in readings:
        by_gpu[r.gpu].append(r)
    silent = gpu_count - len(by_gpu)
    if silent > 0:
        return no_data(
            f"{silent} of {gpu_count} GPUs reported no {LABEL[used]} over {span}: "
            "no data is not idle",
            used,
            coverage,
        )

    peak = max(r.peak for r in readings)
    mean = sum(r.mean for r in readings) / len(readings)
    idle_gpus = [g for g, rs in by_gpu.items() if max(r.peak for r in rs) < below]
    gpus = f"{len(by_gpu)} GPU" + ("s" if len(by_gpu) != 1 else "")
    holding = _memory_evidence(inside)
    caveat = _util_caveat(inside, used, peak, below)

    if len(idle_gpus) == len(by_gpu):
        verdict, value = Verdict.IDLE, peak
        text = f"{LABEL[used]} peaked at {pct(peak)} over {span} on {gpus}"
    elif mean < UNDERUSED_FACTOR * below or len(idle_gpus) * 2 > len(by_gpu):
        verdict, value = Verdict.UNDERUSED, mean
        text = f"{LABEL[used]} {pct(mean)} mean (peak {pct(peak)}) over {span} on {gpus}"
        if idle_gpus:
            text += f"; {len(idle_gpus)} of {gpus} idle"
        else:
            text += f"; below {pct(UNDERUSED_FACTOR * below)} mean: short bursts, mostly waiting"
    else:
        verdict, value = Verdict.ACTIVE, mean
        text = f"{LABEL[used]} {pct(mean)} mean (peak {pct(peak)}) over {span} on {gpus}"
    evidence = "; ".join(part for part in (holding, text, caveat) if part)
    return Classification(
        verdict=verdict,
        signal=used,
        evidence=evidence,
        window_start=start,
        window_end=end,
        coverage=coverage,
        value=round(value, 3),
    )


def _memory_evidence(minutes: Sequence[Reading]) -> str:
    """Who holds GPU memory: a process holding 20 GB while computing nothing is the case
    idle shutdown exists for, and naming it tells the owner what to look at."""
    used = [m.mem_used_bytes for m in minutes if m.mem_used_bytes is not None]
    size, pid = max(((m.top_process_bytes or 0, m.top_process_pid) for m in minutes
                     if m.top_process_pid is not None), default=(0, None))
    if size:
        return f"pid {pid} holds {gb(size)}" + (f" ({gb(max(used))} used on the GPU)"
                                                  if used else "")
    counts = [m.process_count for m in minutes if m.process_count is not None]
    if counts and max(counts) == 0:
        return "no process on the GPU" + (f" ({gb(max(used))} used by the driver)"
                                          if used else "")
    return f"{gb(max(used))} memory held" if used else ""


def _util_caveat(minutes: Sequence[Reading], used: GpuSignal, peak: float, below: float) -> str:
    if used is GpuSignal.UTIL_GPU:
        return "no SM activity metric: fell back to util_gpu, which counts any kernel"
    utils = [m.util_mean for m in minutes if m.util_mean is not None]
    util = sum(utils) / len(utils) if utils else None
    if util is not None and util >= below and peak < below:
        return f"util_gpu {pct(util)} but SM activity {pct(peak)}: tiny kernels, no real work"
    return ""


def pct(value: float) -> str:
    return f"{value:.2f}%" if 0 < value < 1 else f"{value:.1f}%"


def gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _span(start: datetime, end: datetime) -> str:
    seconds = (end - start).total_seconds()
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:g} min"
    return f"{seconds / 3600:.1f} h"
