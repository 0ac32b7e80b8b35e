"""The host beside the GPUs: CPU busy and iowait per core from `/proc/stat`, memory from
`/proc/meminfo`, summarized per minute onto every GPU's summary of that minute.

A GPU at 2% while every core is busy means the job is waiting for its data loader; the
same GPU with idle cores means a batch too small or a latency-bound server. The agent
reads the counters at every tick (two small files) and a minute's figures are the counter
differences from the previous minute's last reading to this minute's last, so the whole
minute counts and a restart loses at most one minute.

/proc/stat fields per line (proc(5)): user nice system idle iowait irq softirq steal guest
guest_nice, in USER_HZ ticks. `guest` time is already in `user` (and `guest_nice` in
`nice`), so they are left out of the total. Busy = total - idle - iowait.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

HOT_CORE = 0.9  # a core busy this share of the minute or more is "pegged"
_FIELDS = 8  # user nice system idle iowait irq softirq steal (guest, guest_nice left out)


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative ticks of one CPU line: busy, iowait and all of it."""

    busy: int
    iowait: int
    total: int


@dataclass(frozen=True)
class HostSample:
    """One reading of the host's counters (cumulative) and its memory in use."""

    all_cpus: CpuTimes
    cores: tuple[CpuTimes, ...]
    mem_used: int | None
    mem_total: int | None


def parse_stat(text: str) -> tuple[CpuTimes, tuple[CpuTimes, ...]]:
    """`/proc/stat` -> (the aggregate `cpu` line, one per `cpuN` line). Raises ValueError
    when the aggregate line is missing or short."""
    aggregate: CpuTimes | None = None
    cores: list[CpuTimes] = []
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, *values = line.split()
        ticks = [int(v) for v in values[:_FIELDS]]
        if len(ticks) < 5:  # kernels before 2.5.41 had no iowait: nothing to read
            raise ValueError(f"/proc/stat line {name!r} has {len(ticks)} fields, needs 5+")
        total = sum(ticks)
        times = CpuTimes(busy=total - ticks[3] - ticks[4], iowait=ticks[4], total=total)
        if name == "cpu":
            aggregate = times
        else:
            cores.append(times)
    if aggregate is None:
        raise ValueError("/proc/stat has no aggregate `cpu` line")
    return aggregate, tuple(cores)


def parse_meminfo(text: str) -> tuple[int | None, int | None]:
    """`/proc/meminfo` -> (bytes in use: MemTotal - MemAvailable, MemTotal bytes)."""
    kib: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if name in ("MemTotal", "MemAvailable") and parts:
            kib[name] = int(parts[0])
    total = kib.get("MemTotal")
    available = kib.get("MemAvailable")
    if total is None:
        return None, None
    used = None if available is None else max(0, total - available) * 1024
    return used, total * 1024


class HostSampler:
    """Reads the host's counters from a proc directory (`/proc`; a copy in tests)."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._proc = proc
        self._failed = False

    def sample(self) -> HostSample | None:
        """The counters now, or None where they cannot be read (logged once): the GPU
        summaries then carry no host figures, which the verdict reports as not measured."""
        try:
            aggregate, cores = parse_stat((self._proc / "stat").read_text())
            used, total = parse_meminfo((self._proc / "meminfo").read_text())
        except (OSError, ValueError) as exc:
            if not self._failed:
                log.warning("cannot read host CPU and memory from %s: %s; GPU summaries "
                            "go without them", self._proc, exc)
                self._failed = True
            return None
        return HostSample(aggregate, cores, used, total)


def host_fields(base: HostSample | None, samples: Sequence[HostSample]) -> dict[str, object]:
    """One minute's host figures, GpuMinute field names: CPU from `base` (the previous
    minute's last reading, else this minute's first) to this minute's last reading."""
    if not samples:
        return {}
    first = base if base is not None else samples[0]
    last = samples[-1]
    out: dict[str, object] = {}
    span = last.all_cpus.total - first.all_cpus.total
    if span > 0:
        busy = last.all_cpus.busy - first.all_cpus.busy
        iowait = last.all_cpus.iowait - first.all_cpus.iowait
        out["host_cpu_pct"] = _pct(busy / span)
        out["host_iowait_pct"] = _pct(iowait / span)
        if len(first.cores) == len(last.cores) and last.cores:  # a CPU hot-plugged: skip
            out["host_cpus"] = len(last.cores)
            out["host_hot_cores"] = sum(
                1 for a, b in zip(first.cores, last.cores, strict=True)
                if b.total > a.total and (b.busy - a.busy) / (b.total - a.total) >= HOT_CORE)
    used = [s.mem_used for s in samples if s.mem_used is not None]
    if used:
        out["host_mem_used_bytes"] = max(used)
    if last.mem_total is not None:
        out["host_mem_total_bytes"] = last.mem_total
    return out


def _pct(share: float) -> float:
    return round(min(100.0, max(0.0, share * 100)), 3)
