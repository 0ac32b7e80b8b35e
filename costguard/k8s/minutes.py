"""A workload's (or one pod's) GPU readings as the engine and the efficiency verdict read
them: `GpuMinute`s numbered across its pods, each carrying as its "host" the CPU its pods
used of what they request that step (cAdvisor). A workload whose GPUs wait while its pods
keep their CPUs busy is work in progress, held back as a busy host is
(telemetry/corroborate.py); a pod pinned at its CPU request with a waiting GPU is
data-loading-bound (k8s/underused.py)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from costguard.k8s.model import Pod
from costguard.k8s.workloads import PROVIDER
from costguard.model import GpuMinute, TelemetrySource


def gpu_minutes(instance_id: str, pods: Sequence[tuple[int, Pod | None]]) -> list[GpuMinute]:
    """The readings of `pods` (each with the GPU units it requests; None: not in this
    read, its GPUs' numbers kept free) under `instance_id`."""
    out = []
    offset = 0
    cpu = _cpu(pod for _, pod in pods if pod is not None)
    for units, pod in pods:
        if pod is None:
            offset += units
            continue
        for m in pod.readings:
            host = cpu.get(m.minute.timestamp())
            out.append(GpuMinute(
                provider=PROVIDER, instance_id=instance_id, gpu_index=offset + m.gpu_index,
                minute=m.minute, source=TelemetrySource.DCGM, span_minutes=m.span_minutes,
                util_mean=m.util_mean, util_max=m.util_max, sm_mean=m.sm_mean,
                sm_max=m.sm_max, mem_used_bytes=m.mem_used_bytes,
                host_cpu_pct=host[0] if host else None, host_cpus=host[1] if host else None))
        offset += max(units, len(pod.devices))
    return out


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
