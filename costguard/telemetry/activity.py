"""Host activity the agent reads beside the GPUs: what corroborates work in progress.

Per tick (cheap counters, all through psutil): disk bytes read and written, network bytes
received and sent (loopback left out), and the CPU time and start time of the processes
holding each GPU (their pids come from NVML). Once a minute (at the minute's close): the
logged-in sessions and seconds since the last input on any of their terminals (the
terminal's access time, as `w` reads it), and the Jupyter servers' kernels (`GET
/api/kernels` of each configured server that answers without credentials: the kernel's
`execution_state` and `last_activity`, jupyter_server's kernel model).

A minute's figures are counter differences from the previous minute's last reading to this
minute's last, as for CPU (`costguard.telemetry.host`). Whatever cannot be read is None,
which the corroboration reports as not measured; nothing here ever fails the agent's tick.
Raw samples can be recorded (`costguard agent --record-host FILE`, JSON lines) and replayed
through the same code (`minute_fields`): the thresholds' defaults were measured that way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import httpx

from costguard.bounded_read import read_at_most
from costguard.limited_json import parse_json
from costguard.telemetry.host import CpuTimes, HostSample, host_fields

log = logging.getLogger(__name__)

JUPYTER_TIMEOUT_S = 2.0
JUPYTER_MAX_BYTES = 2**20  # a kernel's model is ~200 bytes: thousands of kernels fit


@dataclass(frozen=True)
class ProcTimes:
    """A process holding a GPU: its CPU seconds so far (user + system) and start time."""

    cpu_s: float
    started: float


@dataclass(frozen=True)
class ActivitySample:
    """One reading of the host's activity counters (cumulative) at `t` (Unix seconds)."""

    t: float
    disk_bytes: int | None = None
    net_bytes: int | None = None
    procs: Mapping[int, ProcTimes] = field(default_factory=dict)  # pid -> times
    # read once a minute (None in the other ticks' samples)
    sessions: int | None = None
    input_idle_s: float | None = None
    kernels: tuple[tuple[str, float], ...] | None = None  # (execution_state, last activity)

    def as_json(self) -> str:
        out = asdict(self)
        out["procs"] = {str(pid): [p.cpu_s, p.started] for pid, p in self.procs.items()}
        return json.dumps(out, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> ActivitySample:
        raw = json.loads(line)
        procs = {int(pid): ProcTimes(float(v[0]), float(v[1]))
                 for pid, v in (raw.get("procs") or {}).items()}
        kernels = raw.get("kernels")
        return cls(t=float(raw["t"]), disk_bytes=raw.get("disk_bytes"),
                   net_bytes=raw.get("net_bytes"), procs=procs,
                   sessions=raw.get("sessions"), input_idle_s=raw.get("input_idle_s"),
                   kernels=None if kernels is None else tuple(
                       (str(k[0]), float(k[1])) for k in kernels))


class ActivityReader:
    """Reads the counters through psutil (imported lazily: only the agent needs it) and the
    Jupyter servers at `jupyter_urls` through `client`."""

    def __init__(self, *, jupyter_urls: Sequence[str] = (), client: httpx.Client | None = None,
                 dev: Path = Path("/dev")) -> None:
        self._jupyter = [u.rstrip("/") for u in jupyter_urls]
        self._client = client
        self._dev = dev
        self._warned: set[str] = set()
        self._loopback_tls: httpx.Client | None = None  # made for the first https one

    def _once(self, what: str, exc: BaseException) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("cannot read %s: %s; host activity goes without it", what, exc)

    def sample(self, t: float, gpu_pids: Iterable[int], *, minute_end: bool = False
               ) -> ActivitySample:
        import psutil

        disk = net = None
        try:
            io = psutil.disk_io_counters(perdisk=False)  # whole disks, not partitions
            disk = None if io is None else int(io.read_bytes + io.write_bytes)
        except (OSError, RuntimeError) as exc:
            self._once("disk counters", exc)
        try:
            nics = psutil.net_io_counters(pernic=True)
            net = sum(int(n.bytes_recv + n.bytes_sent) for name, n in nics.items()
                      if name != "lo")
        except (OSError, RuntimeError) as exc:
            self._once("network counters", exc)
        procs: dict[int, ProcTimes] = {}
        for pid in set(gpu_pids):
            try:
                p = psutil.Process(pid)
                with p.oneshot():
                    times = p.cpu_times()
                    procs[pid] = ProcTimes(times.user + times.system, p.create_time())
            except (psutil.Error, OSError):
                continue  # gone, or in another pid namespace: nothing to say about it
        if not minute_end:
            return ActivitySample(t=t, disk_bytes=disk, net_bytes=net, procs=procs)
        sessions, input_idle = self._sessions(t)
        return ActivitySample(t=t, disk_bytes=disk, net_bytes=net, procs=procs,
                              sessions=sessions, input_idle_s=input_idle,
                              kernels=self._kernels())

    def _sessions(self, t: float) -> tuple[int | None, float | None]:
        """Logged-in sessions, and seconds since the last input on any of their terminals."""
        import psutil

        try:
            users = psutil.users()
        except (OSError, RuntimeError) as exc:
            self._once("logged-in sessions", exc)
            return None, None
        idle: list[float] = []
        for u in users:
            if not u.terminal:
                continue
            try:
                idle.append(max(0.0, t - (self._dev / u.terminal).stat().st_atime))
            except OSError:
                continue
        return len(users), (min(idle) if idle else None)

    def _kernels(self) -> tuple[tuple[str, float], ...] | None:
        """Every kernel of every configured Jupyter server that answered; None when none
        did (not measured, which is not the same as no kernels)."""
        if not self._jupyter or self._client is None:
            return None
        kernels: list[tuple[str, float]] = []
        answered = False
        for url in self._jupyter:
            try:
                body = self._get_bounded(f"{url}/api/kernels")
            except httpx.HTTPError:
                continue  # no server there (yet): quietly not measured
            except ValueError as exc:  # another status, or a body past the bound
                self._once(f"Jupyter kernels at {url}", exc)
                continue
            try:
                kernels.extend(parse_kernels(parse_json(body)))
                answered = True
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                self._once(f"Jupyter kernels at {url}", exc)
        return tuple(kernels) if answered else None


    def _get_bounded(self, url: str) -> bytes:
        """A 200's body, read up to `JUPYTER_MAX_BYTES` (a server on the host answering
        gigabytes never fills the agent's memory). Raises httpx.HTTPError, or ValueError
        for another status or a longer body."""
        assert self._client is not None
        with self._for(url).stream("GET", url, timeout=JUPYTER_TIMEOUT_S) as response:
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}: it must answer without a "
                                 "token (docs/agent.md)")
            body = read_at_most(response, JUPYTER_MAX_BYTES)
            if len(body) > JUPYTER_MAX_BYTES:
                raise ValueError(f"its answer is over {JUPYTER_MAX_BYTES} bytes")
            return body


    def _for(self, url: str) -> httpx.Client:
        """The client for `url`: a Jupyter server on this host over HTTPS (a SageMaker
        notebook instance's, on 8443) has a self-signed certificate, and its traffic never
        leaves the host, so it is read without verifying one; any other as configured."""
        parsed = httpx.URL(url)
        if parsed.scheme != "https" or parsed.host not in LOOPBACK_HOSTS:
            assert self._client is not None
            return self._client
        if self._loopback_tls is None:
            self._loopback_tls = httpx.Client(verify=False)  # loopback only
        return self._loopback_tls


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def parse_kernels(body: Any) -> list[tuple[str, float]]:
    """jupyter_server's `GET /api/kernels` body -> (execution_state, last activity as Unix
    seconds) per kernel. Raises ValueError, TypeError or KeyError on another shape."""
    if not isinstance(body, list):
        raise ValueError("GET /api/kernels did not answer a list")
    out = []
    for k in body:
        stamp = str(k["last_activity"]).replace("Z", "+00:00")
        out.append((str(k.get("execution_state", "unknown")),
                    datetime.fromisoformat(stamp).timestamp()))
    return out


def minute_fields(base: ActivitySample | None, samples: Sequence[ActivitySample],
                  gpu_pids: Mapping[int, Iterable[int]]
                  ) -> tuple[dict[str, object], dict[int, dict[str, object]]]:
    """One minute's figures: the host's (GpuMinute field names) and each GPU's own.

    Rates run from `base` (the previous minute's last sample, else this minute's first) to
    this minute's last sample. `gpu_pids`: the pids NVML saw on each GPU this minute."""
    if not samples:
        return {}, {}
    first = base if base is not None else samples[0]
    last = samples[-1]
    span = last.t - first.t
    host: dict[str, object] = {}
    if span > 0:
        for name, key in (("disk_bytes", "host_disk_bps"), ("net_bytes", "host_net_bps")):
            a, b = getattr(first, name), getattr(last, name)
            if a is not None and b is not None and b >= a:  # a counter reset: no figure
                host[key] = round((b - a) / span, 1)
    ends = [s for s in samples if s.sessions is not None or s.kernels is not None]
    if ends:
        end = ends[-1]
        if end.sessions is not None:
            host["host_sessions"] = end.sessions
        if end.input_idle_s is not None:
            host["host_input_idle_s"] = round(end.input_idle_s, 1)
        if end.kernels is not None:
            host["kernels_busy"] = sum(1 for state, _ in end.kernels if state == "busy")
            if end.kernels:
                host["kernel_idle_s"] = round(max(0.0, end.t - max(a for _, a in end.kernels)), 1)
    per_gpu: dict[int, dict[str, object]] = {}
    for gpu, pids in gpu_pids.items():
        figures = _process_figures(first, samples, last, set(pids))
        if figures:
            per_gpu[gpu] = figures
    return host, per_gpu


def _process_figures(first: ActivitySample, samples: Sequence[ActivitySample],
                     last: ActivitySample, pids: set[int]) -> dict[str, object]:
    """CPU the GPU's processes used over the minute (percent of one core; a process that
    started within the minute counts from its first sample) and the youngest's age."""
    used = 0.0
    seen = False
    for pid in pids:
        end = last.procs.get(pid)
        if end is None:
            continue
        start = first.procs.get(pid) or next(
            (s.procs[pid] for s in samples if pid in s.procs), None)
        if start is None or start.started != end.started:  # the pid was reused
            continue
        since = first.t if pid in first.procs else next(s.t for s in samples if pid in s.procs)
        if last.t > since:
            used += max(0.0, end.cpu_s - start.cpu_s) / (last.t - since)
            seen = True
    ages = [last.t - last.procs[p].started for p in pids if p in last.procs]
    out: dict[str, object] = {}
    if seen:
        out["gpu_proc_cpu_pct"] = round(used * 100, 1)
    if ages:
        out["gpu_proc_age_s"] = round(max(0.0, min(ages)), 1)
    return out


class ActivityRecorder:
    """Writes raw activity samples as JSON lines (`--record-host`), each with the host's
    CPU counters of the same tick (`"stat"`: /proc/stat's aggregate and per-core busy,
    iowait and total ticks, and memory used and total) where they were read."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, sample: ActivitySample, host: HostSample | None = None) -> None:
        line = sample.as_json()
        if host is not None:
            stat = {"all": _times(host.all_cpus), "cores": [_times(c) for c in host.cores],
                    "mem": [host.mem_used, host.mem_total]}
            line = line[:-1] + ',"stat":' + json.dumps(stat, separators=(",", ":")) + "}"
        self._out.write(line + "\n")
        self._out.flush()


def _times(t: CpuTimes) -> list[int]:
    return [t.busy, t.iowait, t.total]


def read_recording(lines: Iterable[str]) -> list[tuple[ActivitySample, HostSample | None]]:
    """A `--record-host` recording's samples and CPU counters (blank and `#` lines
    skipped)."""
    out = []
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        stat = json.loads(line).get("stat")
        host = None if stat is None else HostSample(
            CpuTimes(*stat["all"]), tuple(CpuTimes(*c) for c in stat["cores"]), *stat["mem"])
        out.append((ActivitySample.from_json(line), host))
    return out


Replayed = tuple[float, dict[str, object], dict[int, dict[str, object]]]


def replay(recording: Sequence[tuple[ActivitySample, HostSample | None]],
           gpu_pids: Mapping[int, Iterable[int]] | None = None) -> list[Replayed]:
    """A recording as the agent would have summarized it: per UTC minute, (minute start,
    host figures (CPU and activity), per-GPU figures). The sample that turns a minute
    (`sessions` read) closes the minute before it, as in the agent."""
    groups: list[tuple[float, list[tuple[ActivitySample, HostSample | None]]]] = []
    for s, cpu in recording:
        minute = s.t - s.t % 60
        turns = s.sessions is not None or s.kernels is not None
        if groups and turns and minute > groups[-1][0]:
            groups[-1][1].append((s, cpu))  # the closing minute's last reading
            groups.append((minute, []))
            continue
        if not groups or minute > groups[-1][0]:
            groups.append((minute, []))
        groups[-1][1].append((s, cpu))
    out = []
    base: ActivitySample | None = None
    cpu_base: HostSample | None = None
    for minute, group in groups:
        if not group:
            continue
        samples = [s for s, _ in group]
        # unnamed: every process the recording followed is GPU 0's
        pids = gpu_pids if gpu_pids is not None else {0: {p for s in samples for p in s.procs}}
        figures, per_gpu = minute_fields(base, samples, pids)
        cpus = [h for _, h in group if h is not None]
        figures.update(host_fields(cpu_base, cpus))
        out.append((minute, figures, per_gpu))
        base = samples[-1]
        cpu_base = cpus[-1] if cpus else cpu_base
    return out

