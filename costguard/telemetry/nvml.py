"""The GPU sampler: reads every GPU through NVML (`pynvml` from nvidia-ml-py).

The module object is injected so tests can hand in a fake that raises pynvml's own
`NVMLError_*` classes. Rules:

* NVML cannot start (no library, no driver, no permission) -> `NvmlUnavailable`, whose
  message says what to install or check. Nothing else escapes.
* A field NVML refuses (`NVMLError_NotSupported`, `NotFound`, ...) becomes None and the
  error text is kept in `NvmlSample.errors`, exactly as the recorder writes it.
* A GPU that falls off the bus (`NVMLError_GpuIsLost`, `Unknown`) is recorded: from then on
  each tick yields a sample for it with `errors["device"]` set and no readings, so the
  minute summary shows a GPU without data rather than the agent dying.
* SM activity comes from GPM (Hopper and newer). Each tick takes one GPM sample per GPU and
  reads the metrics between it and the previous tick's sample, so the window covers the
  whole second (the 0.1 s windows of a one-off reading can miss a 2 s burst entirely).
* MIG: a GPU in MIG mode is reported slice by slice; slice `s` of GPU `g` gets index
  `100 * (g + 1) + s` (utilization is not available per slice; GPM is).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from costguard.errors import CostguardError
from costguard.telemetry.trace import NvmlSample, OpenedSampler, ProcessMemory, ProcessUtil

log = logging.getLogger(__name__)
T = TypeVar("T")

GPM_METRICS = ("sm_util", "sm_occupancy", "any_tensor_util", "dram_bw_util", "graphics_util")
MIG_INDEX_BASE = 100
_LOST = ("NVMLError_GpuIsLost", "NVMLError_Unknown", "NVMLError_ResetRequired")


class NvmlUnavailable(CostguardError, RuntimeError):
    """NVML could not be started on this machine."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"cannot read the GPUs through NVML: {reason}. Install the NVIDIA driver "
            "(it ships libnvidia-ml.so) and run the agent on the GPU machine, inside a "
            "container started with --gpus all; to test without a GPU use "
            "`costguard agent replay FILE`."
        )


def load_pynvml() -> Any:
    """Import NVIDIA's binding (package nvidia-ml-py, module pynvml)."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a dependency of costguard
        raise NvmlUnavailable("the nvidia-ml-py package is not installed") from exc
    return pynvml


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass
class _Device:
    index: int  # what the samples call it
    handle: Any
    parent: Any = None  # the physical GPU of a MIG slice
    gpu_instance_id: int | None = None
    gpm: bool = False
    gpm_prev: Any = None  # GPM buffer holding the previous tick's sample
    gpm_spare: Any = None  # GPM buffer the next sample is taken into
    gpm_ready: bool = False
    process_ts: int = 0
    lost: str | None = None
    errors: dict[str, str] = field(default_factory=dict)


class NvmlSampler(OpenedSampler):
    """Samples every GPU (or MIG slice) once per `sample()` call."""

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        clock: Callable[[], float] = time.time,
        gpm: bool = True,
    ) -> None:
        self._nvml = nvml if nvml is not None else load_pynvml()
        self._clock = clock
        self._want_gpm = gpm
        self._devices: list[_Device] = []
        self._header: dict[str, Any] = {}
        self._open = False

    # lifecycle ---------------------------------------------------------------------------
    def open(self) -> None:
        n = self._nvml
        try:
            n.nvmlInit()
            count = int(n.nvmlDeviceGetCount())
            handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except n.NVMLError as exc:
            raise NvmlUnavailable(_error_text(exc)) from None
        self._open = True
        first = handles[0] if handles else None
        self._header = {
            "name": self._text(lambda: n.nvmlDeviceGetName(first)) if first else None,
            "uuid": self._text(lambda: n.nvmlDeviceGetUUID(first)) if first else None,
            "driver": self._text(n.nvmlSystemGetDriverVersion),
            "nvml": self._text(n.nvmlSystemGetNVMLVersion),
            "count": count,
        }
        modes: list[Any] = []
        for i, handle in enumerate(handles):
            mig = self._try(n.nvmlDeviceGetMigMode, handle)
            modes.append(mig)
            if isinstance(mig, list | tuple) and mig and mig[0] == 1:
                self._devices.extend(self._mig_slices(i, handle))
            else:
                self._devices.append(_Device(index=i, handle=handle))
        self._header["mig_mode"] = modes[0] if len(modes) == 1 else modes
        for dev in self._devices:
            dev.gpm = self._want_gpm and self._gpm_supported(dev.parent or dev.handle)
        self._header["gpm_supported"] = any(d.gpm for d in self._devices)
        self._header["devices"] = [d.index for d in self._devices]

    def close(self) -> None:
        if not self._open:
            return
        for dev in self._devices:
            for s in (dev.gpm_prev, dev.gpm_spare):
                if s is not None:
                    self._try(self._nvml.nvmlGpmSampleFree, s)
        self._try(self._nvml.nvmlShutdown)
        self._open = False

    @property
    def header(self) -> dict[str, Any]:
        """Device identity for the trace header (after `open`)."""
        return dict(self._header)

    @property
    def device_indexes(self) -> list[int]:
        return [d.index for d in self._devices]

    @property
    def lost(self) -> dict[int, str]:
        return {d.index: d.lost for d in self._devices if d.lost}

    # sampling ----------------------------------------------------------------------------
    def sample(self) -> list[NvmlSample]:
        """One sample per device; never raises for a device problem."""
        if not self._open:
            raise RuntimeError("NvmlSampler.sample() called before open()")
        t = round(self._clock(), 3)
        return [self._sample_device(dev, t) for dev in self._devices]

    def _sample_device(self, dev: _Device, t: float) -> NvmlSample:
        if dev.lost:
            return NvmlSample(
                t=t, gpu=dev.index, processes=None, process_util=None, errors={"device": dev.lost}
            )
        n, h = self._nvml, dev.handle
        dev.errors = {}
        util = self._field(dev, "util_gpu", lambda: n.nvmlDeviceGetUtilizationRates(h))
        mem = self._field(dev, "mem_used", lambda: n.nvmlDeviceGetMemoryInfo(h))
        power = self._field(dev, "power_mw", lambda: n.nvmlDeviceGetPowerUsage(h))
        limit = self._field(dev, "power_limit_mw",
                            lambda: n.nvmlDeviceGetEnforcedPowerLimit(h))
        temp = self._field(
            dev, "temp_c", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        )
        clock = self._field(
            dev, "sm_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
        )
        pstate = self._field(dev, "pstate", lambda: n.nvmlDeviceGetPerformanceState(h))
        procs = self._field(dev, "processes", lambda: n.nvmlDeviceGetComputeRunningProcesses(h))
        putil = self._field(
            dev, "process_util", lambda: n.nvmlDeviceGetProcessUtilization(h, dev.process_ts)
        )
        dev.process_ts = max(0, int(t * 1e6) - 1_000_000)
        gpm = self._gpm(dev) if dev.gpm else None
        if dev.lost:  # lost during this tick: record it, no half-read values
            return self._sample_device(dev, t)
        errors = dict(dev.errors)
        if util is None and "util_gpu" in errors:
            errors["util_mem"] = errors["util_gpu"]
        if mem is None and "mem_used" in errors:
            errors["mem_total"] = errors["mem_used"]
        return NvmlSample(
            t=t,
            gpu=dev.index,
            util_gpu=_int_attr(util, "gpu"),
            util_mem=_int_attr(util, "memory"),
            mem_used=_int_attr(mem, "used"),
            mem_total=_int_attr(mem, "total"),
            power_mw=_opt_int(power),
            power_limit_mw=_opt_int(limit),
            temp_c=_opt_int(temp),
            sm_clock_mhz=_opt_int(clock),
            pstate=_opt_int(pstate),
            processes=None
            if procs is None
            else tuple(
                ProcessMemory(pid=int(p.pid), used_bytes=_opt_int(p.usedGpuMemory)) for p in procs
            ),
            process_util=None
            if putil is None
            else tuple(
                ProcessUtil(
                    pid=int(p.pid),
                    sm=_opt_int(p.smUtil),
                    mem=_opt_int(p.memUtil),
                    ts=_opt_int(p.timeStamp),
                )
                for p in putil
            ),
            gpm=gpm,
            errors=errors,
        )

    def _field(self, dev: _Device, name: str, call: Callable[[], T]) -> T | None:
        """Run one NVML query; failures become None (and a lost GPU is marked lost)."""
        if dev.lost:
            return None
        try:
            return call()
        except self._nvml.NVMLError as exc:
            text = _error_text(exc)
            if type(exc).__name__ in _LOST:
                dev.lost = text
                log.error("GPU %s lost: %s; recording it as without data", dev.index, text)
            dev.errors[name] = text
            return None

    # GPM ---------------------------------------------------------------------------------
    def _gpm_supported(self, handle: Any) -> bool:
        support = self._try(lambda: self._nvml.nvmlGpmQueryDeviceSupport(handle))
        return bool(getattr(support, "isSupportedDevice", 0))

    def _gpm(self, dev: _Device) -> dict[str, float] | None:
        n = self._nvml
        if dev.gpm_spare is None:
            buffers = self._field(
                dev, "gpm", lambda: (n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc())
            )
            if buffers is None:
                return None
            dev.gpm_prev, dev.gpm_spare = buffers
        if self._gpm_take(dev, dev.gpm_spare) is None:
            return None
        result = None
        if dev.gpm_ready:
            result = self._gpm_metrics(dev, dev.gpm_prev, dev.gpm_spare)
        # the sample just taken opens the next window; the older buffer is reused
        dev.gpm_prev, dev.gpm_spare, dev.gpm_ready = dev.gpm_spare, dev.gpm_prev, True
        return result

    def _gpm_metrics(self, dev: _Device, older: Any, newer: Any) -> dict[str, float] | None:
        n = self._nvml
        ids = {k: getattr(n, "NVML_GPM_METRIC_" + k.upper(), None) for k in GPM_METRICS}
        wanted = {k: v for k, v in ids.items() if v is not None}
        request = n.c_nvmlGpmMetricsGet_t()
        request.version = n.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1, request.sample2 = older, newer
        for i, metric in enumerate(wanted.values()):
            request.metrics[i].metricId = metric
        result = self._field(dev, "gpm", lambda: n.nvmlGpmMetricsGet(request))
        if result is None:
            return None
        return {
            k: round(float(result.metrics[i].value), 3)
            for i, k in enumerate(wanted)
            if int(getattr(result.metrics[i], "nvmlReturn", 0)) == 0
        }

    def _gpm_take(self, dev: _Device, sample: Any) -> Any:
        n = self._nvml
        if dev.parent is not None:
            return self._field(
                dev, "gpm", lambda: n.nvmlGpmMigSampleGet(dev.parent, dev.gpu_instance_id, sample)
            )
        return self._field(dev, "gpm", lambda: n.nvmlGpmSampleGet(dev.handle, sample))

    # MIG ---------------------------------------------------------------------------------
    def _mig_slices(self, gpu: int, parent: Any) -> list[_Device]:
        n = self._nvml
        slices: list[_Device] = []
        most = self._try(lambda: n.nvmlDeviceGetMaxMigDeviceCount(parent)) or 0
        for s in range(int(most)):
            handle = self._try(n.nvmlDeviceGetMigDeviceHandleByIndex, parent, s)
            if handle is None:
                continue  # slot without a slice
            gi = self._try(n.nvmlDeviceGetGpuInstanceId, handle)
            slices.append(
                _Device(
                    index=MIG_INDEX_BASE * (gpu + 1) + s,
                    handle=handle,
                    parent=parent,
                    gpu_instance_id=gi,
                )
            )
        return slices

    # helpers -----------------------------------------------------------------------------
    def _try(self, call: Callable[..., T], *args: Any) -> T | None:
        try:
            return call(*args)
        except self._nvml.NVMLError:
            return None

    def _text(self, call: Callable[[], Any]) -> str | None:
        value = self._try(call)
        if isinstance(value, bytes):
            return value.decode(errors="replace")
        return None if value is None else str(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _int_attr(obj: Any, name: str) -> int | None:
    return None if obj is None else _opt_int(getattr(obj, name, None))
