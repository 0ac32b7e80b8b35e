"""A workload's (or one pod's) GPU readings as the engine and the efficiency verdict read
them: readings numbered across its pods, each carrying as its "host" the CPU its pods used
of what they request that step (cAdvisor). They are rows (`costguard.minute_rows`), as a
cloud's metric answer is, each checked on its own (`providers.cloud_readings.validated`:
one a cluster's Prometheus gives that no reading can hold is dropped, logged and counted,
never the whole read), with no model built per GPU-minute. A workload whose GPUs wait
while its pods keep their CPUs busy is work in progress, held back as a busy host is
(telemetry/corroborate.py); a pod pinned at its CPU request with a waiting GPU is
data-loading-bound (k8s/underused.py)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from costguard.k8s.model import Pod
from costguard.k8s.workloads import PROVIDER
from costguard.minute_rows import LEAD, MinuteRows, names_of
from costguard.model import TelemetrySource
from costguard.providers.cloud_readings import Dropped, validated

# what a pod's reading gives, past `LEAD` (in `GpuMinute`'s order)
_VALUES = ("util_mean", "util_max", "sm_mean", "sm_max", "mem_used_bytes", "host_cpu_pct",
           "host_cpus")
NAMES = names_of(_VALUES)
assert NAMES[len(LEAD):] == _VALUES


def gpu_minutes(instance_id: str, pods: Sequence[tuple[int, Pod | None]], *,
                scope: str = "kubernetes", dropped: Dropped | None = None) -> MinuteRows:
    """`pod_rows` checked: any that is not a valid reading is dropped, logged under `scope`
    and counted in `dropped`."""
    return validated(NAMES, pod_rows(instance_id, pods), scope, dropped)


def pod_rows(instance_id: str, pods: Sequence[tuple[int, Pod | None]], *,
             start: float = -math.inf, end: float = math.inf) -> list[tuple[Any, ...]]:
    """The readings of `pods` (each with the GPU units it requests; None: not in this
    read, its GPUs' numbers kept free) under `instance_id`, those of minutes from `start`
    to before `end` (POSIX seconds), as rows of `NAMES`, not yet checked."""
    rows = []
    offset = 0
    cpu = _cpu(pod for _, pod in pods if pod is not None)
    for units, pod in pods:
        if pod is None:
            offset += units
            continue
        for m in pod.readings:
            t = m.minute.timestamp()
            if not start <= t < end:
                continue
            host_pct, host_cpus = cpu.get(t, (None, None))
            rows.append((PROVIDER, instance_id, offset + m.gpu_index, m.minute,
                         TelemetrySource.DCGM, m.span_minutes, 1, m.util_mean, m.util_max,
                         m.sm_mean, m.sm_max, m.mem_used_bytes, host_pct, host_cpus))
        offset += max(units, len(pod.devices))
    return rows


def _cpu(pods: Iterable[Pod]) -> dict[float, tuple[float, int]]:
    """Per step, the pods' CPU: percent of the cores they request, and those cores
    (rounded up), over the pods cAdvisor measured then."""
    used: dict[float, float] = defaultdict(float)
    asked: dict[float, float] = defaultdict(float)
    for pod in pods:
        for t, cores in pod.cpu_used.items():
            req = pod.steps.get(t)
            if req is not None and req.cpu > 0:
                used[t] += cores
                asked[t] += req.cpu
    return {t: (min(100.0, 100 * used[t] / asked[t]), max(1, math.ceil(asked[t])))
            for t in asked}
