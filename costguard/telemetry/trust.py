"""Signals checked before they are believed: GPU-minutes whose figures contradict each other.

A GPU's counters can lie. dcgm-exporter's `GR_ENGINE_ACTIVE` / SM activity reads 0 under
full load on some H100/H200 nodes (NVIDIA/dcgm-exporter#662, NVIDIA/DCGM#226); some boards
report 100 % utilization while idle; a counter can freeze at one value. A stop judged on such
a minute would stop real work, so the minute is *untrusted*: it counts as no data when a stop
is decided (`policy/stop_check.py`), and `costguard explain` says which rule caught it.

The rules compare a minute's signals with its power draw, the one figure the workload cannot
fake, measured against the GPU's own enforced power limit (`power_limit_w`, which the agent
reads from NVML). Without a power reading (most cloud metrics) or a limit, no rule fires: a
minute is untrusted only on evidence, never for lack of it.

* `sm-zero-under-load`: SM activity below 1 % all minute while util_gpu is 50 % or more and
  power is 40 % of the limit or more. A real kernel that keeps util_gpu up while no SM works
  (a spin-wait, an NCCL kernel waiting for a peer) draws near idle power: 40 % of the limit
  is far above every idle phase of the shared H100 recording (at most 18 %: 127 W of 700 W
  holding memory; 10 % with no process) and far below its busy phase (up to 100 %).
* `util-at-idle-power`: util_gpu 95 % or more while no process holds the GPU and power is
  at most 20 % of the limit (the recording's idle phases: 10-18 %).
* `frozen`: SM activity or util_gpu exactly the same value for 10 or more consecutive
  minutes while the minute's mean power moved by 50 W and 15 % of the limit or more. A
  truly idle GPU reads a constant 0 too, but its power stays flat: the recording's idle
  phases move by at most 28 W from one second to the next, less between minute means.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from costguard.minutes import Reading

SM_NONE_BELOW = 1.0  # SM activity under this all minute: no SM worked
LOADED_UTIL = 50.0
LOADED_POWER_SHARE = 0.40
FULL_UTIL = 95.0
IDLE_POWER_SHARE = 0.20
FROZEN_MINUTES = 10
FROZEN_POWER_W = 50.0
FROZEN_POWER_SHARE = 0.15

Slot = tuple[int, datetime]  # (gpu index, minute)
_MINUTE = timedelta(minutes=1)


class Checked(Reading, Protocol):
    """What the checks read of a GPU-minute: the classifier's figures and the power (a
    `GpuMinute` has all of it)."""

    @property
    def power_w_mean(self) -> float | None: ...
    @property
    def power_limit_w(self) -> float | None: ...


def untrusted(minutes: Iterable[Checked]) -> dict[Slot, str]:
    """Each untrusted (GPU, minute) and the reason, in words with the figures."""
    out: dict[Slot, str] = {}
    series: dict[int, list[Checked]] = defaultdict(list)
    for m in minutes:
        if m.span_minutes != 1:
            continue  # a cloud's 5-minute point carries no power; nothing to compare
        reason = _contradiction(m)
        if reason is not None:
            out[(m.gpu_index, m.minute)] = reason
        series[m.gpu_index].append(m)
    for readings in series.values():
        readings.sort(key=lambda m: m.minute)
        for name, label in (("sm_mean", "SM activity"), ("util_mean", "util_gpu")):
            for run, why in _frozen_runs(readings, name, label):
                for m in run:
                    out.setdefault((m.gpu_index, m.minute), why)
    return out


def _contradiction(m: Checked) -> str | None:
    power, limit = m.power_w_mean, m.power_limit_w
    if power is None or not limit:
        return None
    sm = m.sm_max if m.sm_max is not None else m.sm_mean
    util = m.util_mean
    if (sm is not None and sm < SM_NONE_BELOW and util is not None and util >= LOADED_UTIL
            and power >= LOADED_POWER_SHARE * limit):
        return (f"SM activity {sm:g}% while util_gpu {util:.0f}% and power {power:.0f} W "
                f"of {limit:.0f} W: the SM counter reads 0 under load")
    if (util is not None and util >= FULL_UTIL and m.process_count == 0
            and power <= IDLE_POWER_SHARE * limit):
        return (f"util_gpu {util:.0f}% with no process on the GPU and power {power:.0f} W "
                f"of {limit:.0f} W (idle): utilization that nothing draws power for")
    return None


def _frozen_runs(readings: Sequence[Checked], name: str, label: str
                 ) -> list[tuple[list[Checked], str]]:
    """Runs of FROZEN_MINUTES or more consecutive minutes with one value of `name` while
    power moved."""
    out: list[tuple[list[Checked], str]] = []
    run: list[Checked] = []

    def close() -> None:
        if len(run) < FROZEN_MINUTES:
            return
        powers = [m.power_w_mean for m in run if m.power_w_mean is not None]
        if len(powers) < FROZEN_MINUTES:
            return
        moved = max(powers) - min(powers)
        limits = [m.power_limit_w for m in run if m.power_limit_w]
        needed = max(FROZEN_POWER_W, FROZEN_POWER_SHARE * max(limits)) if limits \
            else FROZEN_POWER_W
        if moved >= needed:
            value = getattr(run[0], name)
            out.append((list(run), f"{label} stuck at exactly {value:g}% for {len(run)} "
                                   f"minutes while power moved {moved:.0f} W: a frozen counter"))

    for m in readings:
        value = getattr(m, name)
        if run and (value is None or value != getattr(run[-1], name)
                    or m.minute - run[-1].minute != _MINUTE):
            close()
            run = []
        if value is not None:
            run.append(m)
    close()
    return out


def describe(found: Mapping[Slot, str]) -> str:
    """One line: how many GPU-minutes were untrusted and why (the commonest reason first,
    with where it was first seen)."""
    if not found:
        return ""
    by_reason: dict[str, list[Slot]] = defaultdict(list)
    for slot, reason in found.items():
        by_reason[reason.split(":")[-1].strip()].append(slot)
    parts = []
    for _, slots in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        gpu, first = min(slots, key=lambda s: s[1])
        parts.append(f"{found[(gpu, first)]} (GPU {gpu} from {first:%H:%M} UTC, "
                     f"{len(slots)} GPU-minute{'s' if len(slots) != 1 else ''})")
    n = len(found)
    return (f"{n} GPU-minute{'s' if n != 1 else ''} untrusted, counted as no data: "
            + "; ".join(parts))
