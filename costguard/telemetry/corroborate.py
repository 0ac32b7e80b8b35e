"""Host activity as corroboration: is work in progress on a host whose GPUs look idle?

Idleness is judged on the GPUs alone, and that is right for *waste*. Stopping is another
decision: a job copying its dataset, a trainer writing a checkpoint, a notebook whose user is
reading, a CPU-bound preprocessing step all leave the GPUs idle while work goes on. The
agent's host figures (`costguard.telemetry.activity`) over the last `recent` minutes of the
idle window say whether any of that is happening (thresholds: `HostActivity`, measured on
recordings, docs/agent.md). Nothing measured is not busy: a host without an agent is judged
on its GPUs (and on the cloud's CPU figure where it has one), and the evidence says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from costguard.minutes import Reading
from costguard.policy.conditions import HostActivity

_MB = 1e6


@dataclass(frozen=True)
class HostVerdict:
    """What the host showed over the span: `busy` with the figures that made it so."""

    busy: bool
    measured: bool
    reasons: tuple[str, ...]  # what crossed a threshold, with its figure
    figures: tuple[str, ...]  # every figure read, in words
    span: str = "10 min"  # what the means are over

    @property
    def evidence(self) -> str:
        if not self.measured:
            return "host activity not measured"
        if self.busy:
            return f"host busy (last {self.span}): " + ", ".join(self.reasons)
        return f"host quiet (last {self.span}): " + ", ".join(self.figures)


class HostFigures(Reading, Protocol):
    """What the corroboration reads of a GPU-minute: where and when, and the host's
    figures (a `GpuMinute` has all of it)."""

    @property
    def host_cpu_pct(self) -> float | None: ...
    @property
    def host_cpus(self) -> int | None: ...
    @property
    def host_hot_cores(self) -> int | None: ...
    @property
    def host_disk_bps(self) -> float | None: ...
    @property
    def host_net_bps(self) -> float | None: ...
    @property
    def host_sessions(self) -> int | None: ...
    @property
    def host_input_idle_s(self) -> float | None: ...
    @property
    def kernels_busy(self) -> int | None: ...
    @property
    def kernel_idle_s(self) -> float | None: ...
    @property
    def gpu_proc_cpu_pct(self) -> float | None: ...
    @property
    def gpu_proc_age_s(self) -> float | None: ...


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def host_activity(minutes: Sequence[HostFigures], end: datetime,
                  rules: HostActivity | None = None) -> HostVerdict:
    """Judge the host over [end - rules.recent, end) from its GPU-minutes' host figures."""
    rules = rules or HostActivity()
    start = end - rules.recent
    recent = [m for m in minutes if m.span_minutes == 1 and start <= m.minute < end]
    per_minute: dict[datetime, HostFigures] = {}
    for m in recent:  # the host's figures are the same on every GPU's minute: one each
        per_minute.setdefault(m.minute, m)
    hosts = list(per_minute.values())
    reasons: list[str] = []
    figures: list[str] = []

    cpu = [m.host_cpu_pct for m in hosts if m.host_cpu_pct is not None]
    cores = [m.host_cpu_pct * m.host_cpus / 100 for m in hosts
             if m.host_cpu_pct is not None and m.host_cpus]
    # pegged cores by the busiest minute, as disk and network below
    hot = max((m.host_hot_cores for m in hosts if m.host_hot_cores is not None), default=None)
    if (pct := _mean(cpu)) is not None:
        used = _mean(cores)
        text = (f"CPU {pct:.0f}%" + (f" ({used:.2f} cores" if used is not None else "")
                + (f", {hot} pegged" if hot else "") + (")" if used is not None else ""))
        figures.append(text)
        if (pct >= rules.cpu_pct or (used is not None and used >= rules.cpu_cores)
                or (hot is not None and hot >= rules.hot_cores)):
            reasons.append(text)
    proc_cpu = _per_gpu_mean(recent, "gpu_proc_cpu_pct")
    if proc_cpu is not None:
        gpu, value = proc_cpu
        text = f"GPU {gpu}'s processes use {value:.0f}% of a core"
        figures.append(text)
        if value >= rules.process_cpu_pct:
            reasons.append(text)
    ages = [(m.gpu_proc_age_s + (end - m.minute - timedelta(minutes=1)).total_seconds(),
             m.gpu_index) for m in recent if m.gpu_proc_age_s is not None]
    if ages:
        age, gpu = min(ages)
        text = f"GPU {gpu}'s youngest process started {_ago(age)}"
        figures.append(text)
        if age < rules.process_started_within.total_seconds():
            reasons.append(text)
    # disk and network by their busiest minute: a checkpoint or a download comes in bursts
    for name, label, limit in (("host_disk_bps", "disk", rules.disk_mb_s),
                               ("host_net_bps", "network", rules.net_mb_s)):
        rates = [getattr(m, name) for m in hosts if getattr(m, name) is not None]
        if rates:
            text = f"{label} up to {max(rates) / _MB:.1f} MB/s"
            figures.append(text)
            if max(rates) / _MB >= limit:
                reasons.append(text)
    within = rules.input_within.total_seconds()
    for idle_name, label in (("host_input_idle_s", "terminal input"),
                             ("kernel_idle_s", "Jupyter kernel activity")):
        since = _since_last(hosts, idle_name, end)
        if since is not None:
            text = f"last {label} {_ago(since)}"
            figures.append(text)
            if since < within:
                reasons.append(text)
    sessions = [m.host_sessions for m in hosts if m.host_sessions is not None]
    if sessions and not any(m.host_input_idle_s is not None for m in hosts):
        figures.append(f"{max(sessions)} session{'s' if max(sessions) != 1 else ''} "
                       "logged in, no input read")
    busy_kernels = [m.kernels_busy for m in hosts if m.kernels_busy is not None]
    if busy_kernels and max(busy_kernels) > 0:
        text = f"{max(busy_kernels)} Jupyter kernel{'s' if max(busy_kernels) != 1 else ''} busy"
        figures.append(text)
        reasons.append(text)
    return HostVerdict(busy=bool(reasons), measured=bool(figures), reasons=tuple(reasons),
                       figures=tuple(figures),
                       span=f"{int(rules.recent.total_seconds() // 60)} min")


def _per_gpu_mean(minutes: Sequence[HostFigures], name: str) -> tuple[int, float] | None:
    """The GPU whose processes' mean of `name` is highest, and that mean."""
    by_gpu: dict[int, list[float]] = {}
    for m in minutes:
        value = getattr(m, name)
        if value is not None:
            by_gpu.setdefault(m.gpu_index, []).append(value)
    if not by_gpu:
        return None
    gpu, values = max(by_gpu.items(), key=lambda kv: sum(kv[1]) / len(kv[1]))
    return gpu, sum(values) / len(values)


def _since_last(hosts: Sequence[HostFigures], name: str, end: datetime) -> float | None:
    """Seconds from the last input (or kernel activity) to `end`: each minute's figure is
    taken at the minute's end, so later minutes are read forward to `end`."""
    values = [getattr(m, name) + (end - m.minute - timedelta(minutes=1)).total_seconds()
              for m in hosts if getattr(m, name) is not None]
    return max(0.0, min(values)) if values else None


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"
