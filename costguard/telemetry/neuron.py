"""AWS Trainium and Inferentia for the agent: `neuron-monitor`'s JSON reports read as the
agent's samples, one per Neuron device (docs/agent.md, "Trainium and Inferentia").

`neuron-monitor` (the aws-neuron-tools package) streams one complete JSON report per line
to stdout (its user guide, tools/neuron-sys-tools/neuron-monitor-user-guide.rst). The agent
runs it with a configuration of its own (every Neuron application, NeuronCore counters and
memory used, once a second) and reads, per report:

* `neuron_hardware_info`: `neuron_device_count` and `neuroncore_per_device_count`;
  an `error` there (no driver) is no data, never idle.
* per application (`neuron_runtime_data[]`, with its `pid`):
  `report.neuroncore_counters.neuroncores_in_use`, each NeuronCore's
  `neuroncore_utilization` (percent over the period), keyed by the core's index on the
  instance (device = index // cores per device); and
  `report.memory_used.neuron_runtime_used_bytes.usage_breakdown.neuroncore_memory_usage`,
  the bytes each core's memory holds by category.

A device's utilization is the mean over its NeuronCores; a core no application uses is 0 %
(the counters list the cores in use). No application at all is a real reading: every
device at 0 %, no process. A report whose counters are missing or name an error, or none
for `STALE_AFTER` seconds, is no data. Each sample is an `NvmlSample` with `util_gpu`
(there is no SM activity on a NeuronCore: the classifier's `auto` signal falls back to
utilization), `mem_used` and the applications holding the device as its processes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from costguard.errors import CostguardError
from costguard.limited_json import JsonRefused, parse_json
from costguard.telemetry.trace import NvmlSample, OpenedSampler, ProcessMemory

log = logging.getLogger(__name__)

COMMAND = "neuron-monitor"
# where aws-neuronx-tools installs it: not on a service's PATH (systemd's is minimal)
INSTALLED_AT = "/opt/aws/neuron/bin"
# what the agent asks of neuron-monitor: every application, the two groups it reads
MONITOR_CONFIG: dict[str, Any] = {
    "period": "1s",
    "neuron_runtimes": [{"tag_filter": ".*", "metrics": [
        {"type": "neuroncore_counters"}, {"type": "memory_used"}]}],
    "system_metrics": [],
}
MAX_LINE = 16 * 2**20  # a report is kilobytes; a longer line is dropped, never held
STALE_AFTER = 10.0  # seconds without a report: no data
FIRST_REPORT_S = 20.0  # how long `open` waits for the first report


class NeuronUnavailable(CostguardError, RuntimeError):
    """neuron-monitor could not be run or said no Neuron device is there."""


@dataclass(frozen=True)
class NeuronReport:
    """One neuron-monitor report, per Neuron device. `error`: why it is no data."""

    t: float
    devices: int = 0
    cores_per_device: int = 0
    util: Mapping[int, float] = field(default_factory=dict)  # device -> mean core %
    memory: Mapping[int, int] = field(default_factory=dict)  # device -> bytes held
    processes: Mapping[int, tuple[ProcessMemory, ...]] = field(default_factory=dict)
    instance_type: str | None = None
    error: str | None = None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pct(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return min(100.0, max(0.0, float(value))) if value == value else None  # NaN: none


def _core(key: Any, per: int, devices: int) -> tuple[int, int] | None:
    """(device, core) of a NeuronCore index as the reports key it ("0", "17")."""
    text = str(key)
    if not text.isdigit():
        return None
    core = int(text)
    return (core // per, core) if core // per < devices else None


def parse_report(doc: Any, t: float) -> NeuronReport:
    """A report as the agent reads it (see the module docstring); never raises."""
    if not isinstance(doc, dict):
        return NeuronReport(t, error="a report that is not a JSON object")
    hw = doc.get("neuron_hardware_info")
    hw = hw if isinstance(hw, dict) else {}
    itype = (doc.get("instance_info") or {}).get("instance_type") if isinstance(
        doc.get("instance_info"), dict) else None
    devices, per = _int(hw.get("neuron_device_count")), _int(hw.get("neuroncore_per_device_count"))
    if hw.get("error") or not devices or not per or devices < 0 or per < 0:
        why = str(hw.get("error") or "no neuron_hardware_info device counts")
        return NeuronReport(t, error=f"neuron-monitor: {why[:200]}")
    cores: dict[int, float] = defaultdict(float)
    memory: dict[int, int] = defaultdict(int)
    held: dict[int, dict[int, int]] = defaultdict(dict)  # device -> pid -> bytes
    runtimes = doc.get("neuron_runtime_data") or []
    for rt in runtimes if isinstance(runtimes, list) else []:
        report = rt.get("report") if isinstance(rt, dict) else None
        counters = report.get("neuroncore_counters") if isinstance(report, dict) else None
        if not isinstance(counters, dict) or counters.get("error"):
            said = counters.get("error") if isinstance(counters, dict) else "no counters"
            return NeuronReport(t, devices, per, instance_type=itype,
                                error=f"neuron-monitor: an application's NeuronCore "
                                      f"counters: {str(said)[:200]}")
        pid = _int(rt.get("pid")) or 0
        in_use = counters.get("neuroncores_in_use")
        for key, data in (in_use.items() if isinstance(in_use, dict) else ()):
            where = _core(key, per, devices)
            value = _pct(data.get("neuroncore_utilization")) if isinstance(data, dict) else None
            if where is None or value is None:
                continue
            cores[where[1]] = min(100.0, cores[where[1]] + value)
            held[where[0]].setdefault(pid, 0)
        used = (report.get("memory_used") or {}) if isinstance(report, dict) else {}
        used = (used.get("neuron_runtime_used_bytes") or {}) if isinstance(used, dict) else {}
        breakdown = (used.get("usage_breakdown") or {}) if isinstance(used, dict) else {}
        by_core = breakdown.get("neuroncore_memory_usage") if isinstance(breakdown, dict) else None
        for key, cats in (by_core.items() if isinstance(by_core, dict) else ()):
            where = _core(key, per, devices)
            if where is None or not isinstance(cats, dict):
                continue
            nbytes = sum(v for v in cats.values() if _int(v) is not None and v >= 0)
            memory[where[0]] += nbytes
            held[where[0]][pid] = held[where[0]].get(pid, 0) + nbytes
    util = {d: sum(cores.get(d * per + c, 0.0) for c in range(per)) / per
            for d in range(devices)}
    procs = {d: tuple(ProcessMemory(pid, b) for pid, b in sorted(held[d].items()))
             for d in range(devices)}
    return NeuronReport(t, devices, per, util, {d: memory.get(d, 0) for d in range(devices)},
                        procs, itype)


def samples_of(report: NeuronReport | None, t: float, devices: Sequence[int]
               ) -> list[NvmlSample]:
    """One sample per device from the latest report: no data (None, with why) where it is
    missing, stale or in error."""
    why: str | None = None
    if report is None:
        why = "no report from neuron-monitor yet"
    elif report.error:
        why = report.error
    elif t - report.t > STALE_AFTER:
        why = f"no report from neuron-monitor for {t - report.t:.0f} s"
    if why or report is None:
        return [NvmlSample(t=t, gpu=d, processes=None, errors={"neuron": why or ""})
                for d in devices]
    return [NvmlSample(t=t, gpu=d, util_gpu=round(report.util.get(d, 0.0)),
                       mem_used=report.memory.get(d), processes=report.processes.get(d, ()))
            for d in devices]


class NeuronMonitorSampler(OpenedSampler):
    """The agent's sampler on a Trainium or Inferentia host: `neuron-monitor` run as a
    child process, its reports read by a thread, the latest one sampled once a second."""

    def __init__(self, command: Sequence[str] | None = None, *,
                 clock: Callable[[], float] = time.time,
                 first_report_s: float = FIRST_REPORT_S) -> None:
        self.command = list(command) if command else [self.find() or COMMAND]
        self._clock = clock
        self._first_report_s = first_report_s
        self._latest: NeuronReport | None = None
        self._devices: list[int] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._config: str | None = None
        self._got = threading.Event()

    @classmethod
    def available(cls) -> bool:
        return cls.find() is not None

    @staticmethod
    def find() -> str | None:
        """neuron-monitor on the PATH, else where the Neuron tools install it."""
        return shutil.which(COMMAND) or shutil.which(COMMAND, path=INSTALLED_AT)

    def open(self) -> None:
        fd, self._config = tempfile.mkstemp(prefix="costguard-neuron-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(MONITOR_CONFIG, fh)
        try:
            self._proc = subprocess.Popen([*self.command, "-c", self._config],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          stdin=subprocess.DEVNULL)
        except OSError as exc:
            self.close()
            raise NeuronUnavailable(f"cannot run {self.command[0]}: {exc.strerror or exc}"
                                    ) from None
        assert self._proc.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(self._proc.stdout,),
                                        name="neuron-monitor", daemon=True)
        self._thread.start()
        if not self._got.wait(self._first_report_s):
            self.close()
            raise NeuronUnavailable(f"{self.command[0]} sent no report in "
                                    f"{self._first_report_s:g} s")
        first = self._latest
        if first is None or first.devices <= 0:
            why = first.error if first is not None else "no report"
            self.close()
            raise NeuronUnavailable(why or "no Neuron device")
        self._devices = list(range(first.devices))

    def _read(self, stream: IO[bytes]) -> None:
        while True:
            line = stream.readline(MAX_LINE + 1)
            if not line:
                return
            if len(line) > MAX_LINE:  # the rest of an endless line is skipped, not held
                while line and not line.endswith(b"\n"):
                    line = stream.readline(MAX_LINE)
                log.warning("neuron-monitor: a report over %d MiB skipped", MAX_LINE >> 20)
                continue
            if not line.strip():
                continue
            try:
                doc = parse_json(line)
            except (JsonRefused, ValueError) as exc:
                log.warning("neuron-monitor: a line that is not a report: %s", str(exc)[:200])
                continue
            report = parse_report(doc, self._clock())
            if report.devices or self._latest is None:
                self._latest = report
            else:  # an error report keeps the device count known from before
                self._latest = NeuronReport(report.t, self._latest.devices,
                                            self._latest.cores_per_device,
                                            instance_type=self._latest.instance_type,
                                            error=report.error)
            self._got.set()

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._thread is not None:
            self._thread.join(5)
        if self._config is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._config)
            self._config = None

    @property
    def header(self) -> dict[str, Any]:
        first = self._latest
        return {"accelerator": "aws-neuron", "devices": len(self._devices),
                "neuroncores_per_device": first.cores_per_device if first else None,
                "instance_type": first.instance_type if first else None}

    @property
    def device_indexes(self) -> list[int]:
        return list(self._devices)

    def sample(self) -> list[NvmlSample]:
        t = round(self._clock(), 3)
        if self._proc is not None and self._proc.poll() is not None and self._latest:
            gone = f"neuron-monitor exited ({self._proc.returncode})"
            return [NvmlSample(t=t, gpu=d, processes=None, errors={"neuron": gone})
                    for d in self._devices]
        return samples_of(self._latest, t, self._devices)
