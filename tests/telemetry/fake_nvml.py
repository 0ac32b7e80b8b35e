"""A fake `pynvml` module: real pynvml errors and constants, scripted GPUs.

It raises pynvml's own `NVMLError_*` classes (from nvidia-ml-py, importable without a
driver), so the sampler's error handling is exercised against the real exception types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml


@dataclass
class FakeGpu:
    util: int = 0
    util_mem: int = 0
    mem_used: int = 500_000_000
    mem_total: int = 85_520_809_984
    power_mw: int = 70_000
    power_limit_mw: int = 700_000  # an H100 SXM's default limit
    temp_c: int = 40
    sm_clock: int = 345
    pstate: int = 0
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, bytes)
    sm_util: float = 0.0
    gpm_supported: bool = True
    refuse: dict[str, type[pynvml.NVMLError]] = field(default_factory=dict)  # call -> error
    lost: bool = False
    mig_mode: list[int] = field(default_factory=lambda: [0, 0])
    mig_slices: list[FakeGpu] = field(default_factory=list)
    gpu_instance_id: int = 0


class _Metrics:
    def __init__(self) -> None:
        self.metrics = [SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(8)]
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None


class FakeNvml:
    """Drop-in for the `pynvml` module as NvmlSampler uses it."""

    def __init__(self, gpus: list[FakeGpu], *, init_error: type[pynvml.NVMLError] | None = None):
        self.gpus = gpus
        self.init_error = init_error
        self.calls: list[str] = []
        self.initialized = False
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_")):
                setattr(self, name, getattr(pynvml, name))
        self.c_nvmlGpmMetricsGet_t = _Metrics

    # lifecycle
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise self.init_error()
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "13.580.159.04"

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return "GPU-fake"

    def _check(self, h: FakeGpu, call: str) -> None:
        self.calls.append(call)
        if h.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if call in h.refuse:
            raise h.refuse[call]()

    # readings
    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        self._check(h, "utilization")
        return SimpleNamespace(gpu=h.util, memory=h.util_mem)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:
        self._check(h, "memory")
        return SimpleNamespace(used=h.mem_used, total=h.mem_total, free=h.mem_total - h.mem_used)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._check(h, "power")
        return h.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        self._check(h, "power_limit")
        return h.power_limit_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._check(h, "temperature")
        return h.temp_c

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock: int) -> int:
        self._check(h, "clock")
        return h.sm_clock

    def nvmlDeviceGetPerformanceState(self, h: FakeGpu) -> int:
        self._check(h, "pstate")
        return h.pstate

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[Any]:
        self._check(h, "processes")
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in h.processes]

    def nvmlDeviceGetProcessUtilization(self, h: FakeGpu, ts: int) -> list[Any]:
        self._check(h, "process_util")
        if not h.processes:
            raise pynvml.NVMLError_NotFound()
        return [
            SimpleNamespace(pid=p, smUtil=h.util, memUtil=h.util_mem, timeStamp=ts + 1)
            for p, _ in h.processes
        ]

    # GPM
    def nvmlGpmQueryDeviceSupport(self, h: FakeGpu) -> Any:
        self._check(h, "gpm_support")
        return SimpleNamespace(version=1, isSupportedDevice=int(h.gpm_supported))

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(sm_util=None)

    def nvmlGpmSampleFree(self, s: Any) -> None:
        self.calls.append("gpm_free")

    def nvmlGpmSampleGet(self, h: FakeGpu, s: Any) -> Any:
        self._check(h, "gpm_sample")
        s.sm_util = h.sm_util
        return s

    def nvmlGpmMigSampleGet(self, h: FakeGpu, gpu_instance: int, s: Any) -> Any:
        self._check(h, "gpm_mig_sample")
        slice_ = next(m for m in h.mig_slices if m.gpu_instance_id == gpu_instance)
        s.sm_util = slice_.sm_util
        return s

    def nvmlGpmMetricsGet(self, request: _Metrics) -> _Metrics:
        self.calls.append("gpm_metrics")
        by_id = {
            pynvml.NVML_GPM_METRIC_SM_UTIL: request.sample2.sm_util,
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: request.sample2.sm_util / 2,
        }
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            metric.value = by_id.get(metric.metricId, 0.0)
        return request

    # MIG
    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        self._check(h, "mig_mode")
        return h.mig_mode

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, i: int) -> FakeGpu:
        if i >= len(h.mig_slices):
            raise pynvml.NVMLError_NotFound()
        return h.mig_slices[i]

    def nvmlDeviceGetGpuInstanceId(self, h: FakeGpu) -> int:
        return h.gpu_instance_id
