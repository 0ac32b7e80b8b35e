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
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from costguard.clock import utc
from costguard.minutes import Reading, ReadingsView, SignalRecord, aware, covering
from costguard.model import Classification, GpuSignal, Verdict

UNDERUSED_FACTOR = 2.0
SignalChoice = Literal["auto", "sm_active", "util_gpu"]

_MINUTE = timedelta(minutes=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_MINUTE_US = 60_000_000
LABEL = {GpuSignal.SM_ACTIVE: "SM activity", GpuSignal.UTIL_GPU: "util_gpu"}


# the chosen signal of one GPU over one minute, or over each minute a reading spans:
# (GPU index, peak, mean)
_Reading = tuple[int, float, float]


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


def _signal(minutes: Sequence[Reading], sm: bool) -> Iterable[SignalRecord]:
    """One signal's figures of each reading (SM activity's with `sm`, else utilization's):
    read in place from readings held packed (`ReadingsView`), else from each reading."""
    if isinstance(minutes, ReadingsView):
        return minutes.signal(sm)
    return _signal_of(minutes, sm)


def _signal_of(minutes: Sequence[Reading], sm: bool) -> Iterator[SignalRecord]:
    """`_signal` of readings one by one: a one-minute reading starts at its wall minute,
    the stamp less its seconds (in its own zone: `replace(second=0)`)."""
    for m in minutes:
        at = (m.minute - _EPOCH) // _US
        if m.span_minutes == 1:
            at -= m.minute.second * 1_000_000 + m.minute.microsecond
        if sm:
            yield m.gpu_index, at, m.span_minutes, m.sm_max, m.sm_p95, m.sm_mean
        else:
            yield m.gpu_index, at, m.span_minutes, m.util_max, m.util_p95, m.util_mean


def _readings(records: Iterable[SignalRecord], start: datetime, end: datetime,
              gpu_count: int) -> list[_Reading]:
    """One reading per (GPU, minute) slot of [start, end): a reading spanning several
    minutes fills each of them.

    Coverage counts wall minutes of GPUs the instance has, never more: a reading for a GPU
    index beyond `gpu_count` fills no slot, and readings stamped at seconds within the same
    minute fill that one minute's slot (45 summaries sent within one real minute are one
    minute of data, not 45). `records` (`_signal`) carry one signal's figures of each
    reading: its peak and mean are `_peak_mean`'s.

    A slot is keyed by its instant in microseconds since the epoch: the minutes `slots`
    gives, without building and hashing a datetime per minute of a 5-minute reading (the
    classifier runs for every GPU instance twice a cycle)."""
    start_us, end_us = (start - _EPOCH) // _US, (end - _EPOCH) // _US
    seen: dict[tuple[int, int], _Reading] = {}
    for gpu, at, span, top, p95, mean in records:
        if gpu >= gpu_count:
            continue
        # `_peak_mean` inline, and a plain tuple: this loop runs for every reading of every
        # GPU instance twice a cycle (the call and the named tuple were 70 % of it)
        if top is None:
            top = p95 if p95 is not None else mean
            if top is None:
                continue  # no figure of the signal at all
        if mean is None:
            mean = p95 if p95 is not None else top
        reading: _Reading = (gpu, top, mean)
        # a re-sent minute replaces the earlier copy: one slot counts once
        if span == 1:  # its wall minute (`SignalRecord`)
            seen[(gpu, at)] = reading
        else:  # the minutes it spans inside [start, end)
            first = at if at >= start_us else at - (at - start_us) // _MINUTE_US * _MINUTE_US
            for t in range(first, min(at + span * _MINUTE_US, end_us), _MINUTE_US):
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
    inside = covering(minutes if isinstance(minutes, ReadingsView) else map(aware, minutes),
                      start, end)
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
                   else _readings(_signal(inside, True), start, end, gpu_count))
    if signal == "sm_active" or (
        signal == "auto" and sm_readings and _coverage(sm_readings, expected) >= min_coverage
    ):
        used, readings = GpuSignal.SM_ACTIVE, sm_readings
    else:
        used = GpuSignal.UTIL_GPU
        readings = _readings(_signal(inside, False), start, end, gpu_count)

    coverage = _coverage(readings, expected)
    span = _span(start, end)
    if coverage < min_coverage:
        return no_data(
            f"{LABEL[used]} covers {coverage:.0%} of {expected} expected GPU-minutes over "
            f"{span} (needs {min_coverage:.0%}): no data is not idle",
            used,
            coverage,
        )
    # the slots as columns: each GPU's peak, then the instance's peak and mean over them
    slot_gpu, slot_peak, slot_mean = zip(*readings, strict=True) if readings else ((), (), ())
    top: dict[int, float] = {}
    if len(set(slot_gpu)) == 1:
        top[slot_gpu[0]] = max(slot_peak)
    else:
        for g, p in zip(slot_gpu, slot_peak, strict=True):
            if g not in top or p > top[g]:
                top[g] = p
    silent = gpu_count - len(top)
    if silent > 0:
        return no_data(
            f"{silent} of {gpu_count} GPUs reported no {LABEL[used]} over {span}: "
            "no data is not idle",
            used,
            coverage,
        )

    peak = max(slot_peak)
    mean = sum(slot_mean) / len(slot_mean)
    idle_gpus = [g for g, p in top.items() if p < below]
    gpus = f"{len(top)} GPU" + ("s" if len(top) != 1 else "")
    holding = _memory_evidence(inside)
    caveat = _util_caveat(inside, used, peak, below)

    if len(idle_gpus) == len(top):
        verdict, value = Verdict.IDLE, peak
        text = f"{LABEL[used]} peaked at {pct(peak)} over {span} on {gpus}"
    elif mean < UNDERUSED_FACTOR * below or len(idle_gpus) * 2 > len(top):
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


def _column(minutes: Sequence[Reading], field: str) -> list[Any]:
    """One field of every reading (read in place from readings held packed)."""
    if isinstance(minutes, ReadingsView):
        return minutes.column(field)
    return [getattr(m, field) for m in minutes]


def _memory_evidence(minutes: Sequence[Reading]) -> str:
    """Who holds GPU memory: a process holding 20 GB while computing nothing is the case
    idle shutdown exists for, and naming it tells the owner what to look at."""
    used = [b for b in _column(minutes, "mem_used_bytes") if b is not None]
    size, pid = max(((size or 0, pid) for size, pid in zip(
        _column(minutes, "top_process_bytes"), _column(minutes, "top_process_pid"),
        strict=True) if pid is not None), default=(0, None))
    if size:
        return f"pid {pid} holds {gb(size)}" + (f" ({gb(max(used))} used on the GPU)"
                                                  if used else "")
    counts = [n for n in _column(minutes, "process_count") if n is not None]
    if counts and max(counts) == 0:
        return "no process on the GPU" + (f" ({gb(max(used))} used by the driver)"
                                          if used else "")
    return f"{gb(max(used))} memory held" if used else ""


def _util_caveat(minutes: Sequence[Reading], used: GpuSignal, peak: float, below: float) -> str:
    if used is GpuSignal.UTIL_GPU:
        return "no SM activity metric: fell back to util_gpu, which counts any kernel"
    utils = [u for u in _column(minutes, "util_mean") if u is not None]
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
