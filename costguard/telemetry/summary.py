"""Raw NVML samples -> per-minute `GpuMinute` summaries, and realistic simulated minutes.

The agent samples at 1 Hz and pushes one summary per GPU per minute; replay does the same
over any window length. The simulated provider and the demo build their minutes by
resampling the real H100 recording (`sim_minute`), so a "bursty" simulated GPU carries the
same mean, p95 and peaks a real bursty GPU does.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache, lru_cache
from random import Random
from typing import Any, Literal

from costguard.model import GpuMinute, ProviderName, TelemetrySource
from costguard.telemetry.trace import NvmlSample, ProcessMemory, packaged_trace

SimPattern = Literal["busy", "bursty", "held_memory_idle", "tiny_kernels", "no_process"]
PATTERN_PHASE: dict[str, str] = {
    "busy": "busy_matmul",
    "bursty": "bursty_2s_of_10s",
    "held_memory_idle": "held_memory_idle",
    "tiny_kernels": "tiny_kernels",
    "no_process": "no_process",
}
_RECORDED_PERIOD_S = 0.5  # the packaged trace samples twice a second; the agent once


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: always a value that was actually observed."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _clamp_pct(value: float) -> float:
    return min(100.0, max(0.0, value))


def _pcts(values: Iterable[float | None]) -> list[float]:
    """Percentages as read, clamped to 0-100. A value that is not a number is no reading:
    GPM's figures are doubles NVML computes, and a NaN clamped (`max(0.0, nan)` is 0.0) read
    as 0 % SM activity, which made a busy GPU idle."""
    return [_clamp_pct(v) for v in values if v is not None and math.isfinite(v)]


def summarize(
    samples: Sequence[NvmlSample],
    *,
    provider: ProviderName,
    instance_id: str,
    gpu_index: int,
    minute: datetime,
    source: TelemetrySource = TelemetrySource.AGENT,
    host: Mapping[str, object] | None = None,
) -> GpuMinute:
    """One GPU's samples over one window -> its summary. Fields with no reading stay None;
    `host` (`costguard.telemetry.host.host_fields`) adds the host's figures of the window."""
    if not samples:
        raise ValueError("cannot summarize an empty window")
    util = [float(s.util_gpu) for s in samples if s.util_gpu is not None]
    sm = _pcts(s.sm_active for s in samples)
    mem = [s.mem_used for s in samples if s.mem_used is not None]
    total = [s.mem_total for s in samples if s.mem_total is not None]
    power = [s.power_mw / 1000 for s in samples if s.power_mw is not None]
    limits = [s.power_limit_mw / 1000 for s in samples if s.power_limit_mw]
    tensor = _gpm_mean(samples, "any_tensor_util")
    dram = _gpm_mean(samples, "dram_bw_util")
    answered = [s.processes for s in samples if s.processes is not None]
    top: ProcessMemory | None = max(
        (p for procs in answered for p in procs if p.used_bytes is not None),
        key=lambda p: p.used_bytes or 0,
        default=None,
    )
    return GpuMinute(
        provider=provider,
        instance_id=instance_id,
        gpu_index=gpu_index,
        minute=minute,
        source=source,
        samples=len(samples),
        util_mean=_clamp_pct(sum(util) / len(util)) if util else None,
        util_p95=_clamp_pct(percentile(util, 95)) if util else None,
        util_max=_clamp_pct(max(util)) if util else None,
        util_active_share=sum(1 for u in util if u > 0) / len(util) if util else None,
        sm_mean=sum(sm) / len(sm) if sm else None,
        sm_p95=percentile(sm, 95) if sm else None,
        sm_max=max(sm) if sm else None,
        mem_used_bytes=max(mem) if mem else None,
        mem_total_bytes=max(total) if total else None,
        power_w_mean=sum(power) / len(power) if power else None,
        power_limit_w=max(limits) if limits else None,
        process_count=max(len(p) for p in answered) if answered else None,
        top_process_pid=top.pid if top else None,
        top_process_bytes=top.used_bytes if top else None,
        tensor_mean=tensor,
        dram_bw_mean=dram,
        **(host or {}),  # GpuMinute validates the host fields
    )


def _gpm_mean(samples: Sequence[NvmlSample], name: str) -> float | None:
    values = _pcts(s.gpm.get(name) for s in samples if s.gpm is not None)
    return sum(values) / len(values) if values else None


def window_start(t: float, window: timedelta, origin: float = 0.0) -> float:
    """Start (Unix seconds) of the window holding `t`; windows tile from `origin`."""
    size = window.total_seconds()
    return origin + math.floor((t - origin) / size) * size


def summarize_windows(
    samples: Iterable[NvmlSample],
    *,
    provider: ProviderName,
    instance_id: str,
    window: timedelta = timedelta(minutes=1),
    origin: float = 0.0,
    source: TelemetrySource = TelemetrySource.AGENT,
) -> list[GpuMinute]:
    """Group samples by (gpu, window) and summarize each; sorted by window, then GPU.

    With the default one-minute window and origin 0 the windows are UTC minutes.
    """
    if window <= timedelta(0):
        raise ValueError("window must be positive")
    groups: dict[tuple[float, int], list[NvmlSample]] = defaultdict(list)
    for s in samples:
        groups[(window_start(s.t, window, origin), s.gpu)].append(s)
    return [
        summarize(
            groups[key],
            provider=provider,
            instance_id=instance_id,
            gpu_index=key[1],
            minute=datetime.fromtimestamp(key[0], UTC),
            source=source,
        )
        for key in sorted(groups)
    ]


@lru_cache(maxsize=1)
def _profiles() -> dict[str, tuple[NvmlSample, ...]]:
    phases: dict[str, list[NvmlSample]] = defaultdict(list)
    for s in packaged_trace().samples:
        if s.phase:
            phases[s.phase].append(s)
    return {name: tuple(samples) for name, samples in phases.items()}


def phase_profiles() -> dict[str, list[NvmlSample]]:
    """Real samples of the packaged H100 trace, per phase name (`no_process`,
    `busy_matmul`, `held_memory_idle`, `bursty_2s_of_10s`, `tiny_kernels`, ...)."""
    return {name: list(samples) for name, samples in _profiles().items()}


def sim_minute(
    pattern: str,
    provider: ProviderName,
    instance_id: str,
    gpu_index: int,
    minute: datetime,
    rng: Random,
    *,
    gpm: bool = True,
    extra: Mapping[str, object] | None = None,
) -> GpuMinute:
    """A realistic minute for a simulated GPU running `pattern`.

    Takes 60 consecutive 1 Hz readings from the real recording of that phase, starting at a
    random offset and wrapping around, so bursts keep their real rhythm. `gpm=False` drops
    SM activity, as on GPUs older than Hopper. The pid is derived from the instance id.
    `extra` sets further fields (a simulated host's CPU and memory).
    """
    phase, index, update = _draw(pattern, provider, instance_id, gpu_index, minute, rng, gpm,
                                 extra)
    return _minute_templates(phase, gpm)[index].model_copy(update=update)


def sim_row(
    pattern: str,
    names: tuple[str, ...],
    provider: ProviderName,
    instance_id: str,
    gpu_index: int,
    minute: datetime,
    rng: Random,
    *,
    gpm: bool = True,
    extra: Mapping[str, object] | None = None,
) -> tuple[Any, ...]:
    """`sim_minute`'s reading (the same draw from `rng`) as a row of `names` (every field
    it sets among them; `minute_rows.MinuteRows`), without a model: the simulated cloud hands
    its readings over as a real cloud's provider does."""
    phase, index, update = _draw(pattern, provider, instance_id, gpu_index, minute, rng, gpm,
                                 extra)
    at = _positions(names)
    row = list(_template_rows(phase, gpm, names)[index])
    for name, value in update.items():
        row[at[name]] = value
    return tuple(row)


def _draw(pattern: str, provider: ProviderName, instance_id: str, gpu_index: int,
          minute: datetime, rng: Random, gpm: bool, extra: Mapping[str, object] | None,
          ) -> tuple[str, int, dict[str, object]]:
    """Which recorded minute a simulated GPU yields (its phase and index among the phase's
    `_minute_templates`: one draw from `rng`) and what this reading sets over it."""
    phase = PATTERN_PHASE.get(pattern, pattern)
    templates = _minute_templates(phase, gpm)
    index = rng.randrange(len(templates))
    update: dict[str, object] = {
        "provider": provider, "instance_id": instance_id, "gpu_index": gpu_index,
        "minute": minute, **(extra or {}),
    }
    if templates[index].top_process_pid is not None:
        update["top_process_pid"] = 1000 + zlib.crc32(f"{instance_id}/{gpu_index}".encode()) % 60000
    return phase, index, update


@cache
def _positions(names: tuple[str, ...]) -> dict[str, int]:
    return {name: n for n, name in enumerate(names)}


@lru_cache(maxsize=64)
def _template_rows(phase: str, gpm: bool, names: tuple[str, ...]) -> tuple[tuple[Any, ...], ...]:
    """A phase's recorded minutes as rows of `names` (a value field one does not set is
    none, its default). Raises KeyError when one sets a field `names` leaves out."""
    rows = []
    for template in _minute_templates(phase, gpm):
        missing = template.model_fields_set - set(names)
        if missing:
            raise KeyError(f"a simulated minute sets {sorted(missing)}, not in {names}")
        rows.append(tuple(getattr(template, n) for n in names))
    return tuple(rows)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@lru_cache(maxsize=32)
def _minute_templates(phase: str, gpm: bool) -> tuple[GpuMinute, ...]:
    """Every distinct minute a phase can yield (one per starting offset), summarized once:
    the demo draws hundreds of thousands of simulated GPU-minutes, so they are not
    re-summarized from 60 samples each time."""
    profile = _profiles().get(phase)
    if not profile:
        known = ", ".join(sorted(PATTERN_PHASE))
        raise ValueError(f"unknown GPU pattern {phase!r}; use one of: {known}")
    step = round(1 / _RECORDED_PERIOD_S)
    out = []
    for offset in range(len(profile)):
        drawn = []
        for i in range(60):
            real = profile[(offset + i * step) % len(profile)]
            procs = (
                None
                if real.processes is None
                else tuple(ProcessMemory(pid=0, used_bytes=p.used_bytes) for p in real.processes)
            )
            drawn.append(
                NvmlSample(
                    t=real.t,
                    phase=real.phase,
                    util_gpu=real.util_gpu,
                    util_mem=real.util_mem,
                    mem_used=real.mem_used,
                    mem_total=real.mem_total,
                    power_mw=real.power_mw,
                    processes=procs,
                    gpm=real.gpm if gpm else None,
                )
            )
        out.append(summarize(drawn, provider="sim", instance_id="template", gpu_index=0,
                             minute=_EPOCH, source=TelemetrySource.SIM))
    return tuple(out)
