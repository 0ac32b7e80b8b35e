"""NVML traces: the JSON-lines format of `shared/fixtures/nvml/h100_phases.jsonl`.

Line 1 is a header object with `"header": true` (device name, UUID, driver, MIG mode, GPM
support, sampling period, phase plan). Every other line is one `NvmlSample` of one GPU:

    {"t": 1795348197.232, "phase": "no_process", "util_gpu": 0, "util_mem": 0,
     "mem_used": 503316480, "mem_total": 85520809984, "power_mw": 99142, "temp_c": 39,
     "sm_clock_mhz": 465, "pstate": 0, "processes": [{"pid": 419, "used_bytes": 1050673152}],
     "process_util": [{"pid": 419, "sm": 40, "mem": 13, "ts": 1795348234735890}],
     "gpm": {"sm_util": 95.9, "sm_occupancy": 40.1, "any_tensor_util": 60.2, ...}}

A field NVML refused holds `{"error": "NVMLError_NotSupported: Not Supported"}`; the reader
turns it into None and keeps the text in `NvmlSample.errors`, the writer puts it back, so
reading and writing a trace reproduces it byte for byte. `"gpu"` (the device index) is
written only when it is not 0, `"gpm"` only when the sample has GPM metrics or a GPM error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any, Self

from costguard.errors import CostguardError

PACKAGED_TRACE = "h100_phases.jsonl"
_SCALARS = (
    "util_gpu",
    "util_mem",
    "mem_used",
    "mem_total",
    "power_mw",
    "temp_c",
    "sm_clock_mhz",
    "pstate",
)


class TraceError(CostguardError, ValueError):
    """A trace file cannot be read; the message names the file and line."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(
            f"{path}:{line}: {problem} (expected the NVML trace format written by "
            "`costguard agent record`; see docs/agent.md)"
        )


class OpenedSampler:
    """A sampler used as a context manager: opened on entry, closed on exit."""

    def open(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """A compute process on the GPU and the device memory it holds."""

    pid: int
    used_bytes: int | None


@dataclass(frozen=True, slots=True)
class ProcessUtil:
    """`nvmlDeviceGetProcessUtilization` for one pid: SM and memory % since last query."""

    pid: int
    sm: int | None
    mem: int | None
    ts: int | None


@dataclass(frozen=True, slots=True)
class NvmlSample:
    """One reading of one GPU. None = NVML did not answer (text kept in `errors`)."""

    t: float
    phase: str | None = None
    gpu: int = 0
    util_gpu: int | None = None
    util_mem: int | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    power_mw: int | None = None
    temp_c: int | None = None
    sm_clock_mhz: int | None = None
    pstate: int | None = None
    processes: tuple[ProcessMemory, ...] | None = ()
    process_util: tuple[ProcessUtil, ...] | None = ()
    gpm: Mapping[str, float] | None = None
    errors: Mapping[str, str] = field(default_factory=dict)
    # nvmlDeviceGetEnforcedPowerLimit; written only where read (the shared H100 recording
    # predates it)
    power_limit_mw: int | None = None

    @property
    def sm_active(self) -> float | None:
        """GPM SM activity (%), the honest busy signal, when the GPU supports GPM."""
        return None if self.gpm is None else self.gpm.get("sm_util")


@dataclass(frozen=True, slots=True)
class Trace:
    header: Mapping[str, Any]
    samples: list[NvmlSample]
    # the number of a last line cut short (a recording stopped mid-write), left out
    torn_line: int | None = None


def _error_text(value: object) -> str | None:
    if isinstance(value, dict) and set(value) == {"error"}:
        return str(value["error"])
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _opt_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return int(value)


def sample_from_json(obj: Mapping[str, Any]) -> NvmlSample:
    """Build a sample from one decoded line (raises ValueError/KeyError/TypeError)."""
    errors: dict[str, str] = {}
    scalars: dict[str, int | None] = {}
    for name in _SCALARS:
        raw = obj.get(name)
        text = _error_text(raw)
        if text is not None:
            errors[name] = text
            scalars[name] = None
        else:
            scalars[name] = _opt_int(raw)

    processes: tuple[ProcessMemory, ...] | None
    raw_procs = obj.get("processes", [])
    if (text := _error_text(raw_procs)) is not None:
        errors["processes"], processes = text, None
    else:
        processes = tuple(
            ProcessMemory(pid=int(p["pid"]), used_bytes=_opt_int(p.get("used_bytes")))
            for p in raw_procs
        )
    process_util: tuple[ProcessUtil, ...] | None
    raw_pu = obj.get("process_util", [])
    if (text := _error_text(raw_pu)) is not None:
        errors["process_util"], process_util = text, None
    else:
        process_util = tuple(
            ProcessUtil(
                pid=int(p["pid"]),
                sm=_opt_int(p.get("sm")),
                mem=_opt_int(p.get("mem")),
                ts=_opt_int(p.get("ts")),
            )
            for p in raw_pu
        )
    gpm: dict[str, float] | None = None
    raw_gpm = obj.get("gpm")
    if (text := _error_text(raw_gpm)) is not None:
        errors["gpm"] = text
    elif raw_gpm is not None:
        # values stay as written (an int stays an int) so a rewritten trace is identical
        gpm = {str(k): v for k, v in raw_gpm.items() if _is_number(v)}
        if len(gpm) != len(raw_gpm):
            raise ValueError(f"`gpm` values must be numbers, got {raw_gpm!r}")
    t = obj["t"]
    if isinstance(t, bool) or not isinstance(t, int | float):
        raise ValueError(f"`t` must be Unix seconds, got {t!r}")
    phase = obj.get("phase")
    limit = obj.get("power_limit_mw")
    return NvmlSample(
        t=t,
        power_limit_mw=None if _error_text(limit) is not None else _opt_int(limit),
        phase=None if phase is None else str(phase),
        gpu=int(obj.get("gpu", 0)),
        processes=processes,
        process_util=process_util,
        gpm=gpm,
        errors=errors,
        **scalars,
    )


def sample_to_json(s: NvmlSample) -> dict[str, Any]:
    """The line object for `s`, fields in the fixture's order."""
    out: dict[str, Any] = {"t": s.t, "phase": s.phase}
    if s.gpu:
        out["gpu"] = s.gpu
    for name in _SCALARS:
        value = getattr(s, name)
        out[name] = {"error": s.errors[name]} if value is None and name in s.errors else value
    if s.power_limit_mw is not None:
        out["power_limit_mw"] = s.power_limit_mw
    if s.processes is None:
        out["processes"] = {"error": s.errors.get("processes", "unavailable")}
    else:
        out["processes"] = [{"pid": p.pid, "used_bytes": p.used_bytes} for p in s.processes]
    if s.process_util is None:
        out["process_util"] = {"error": s.errors.get("process_util", "unavailable")}
    else:
        out["process_util"] = [
            {"pid": p.pid, "sm": p.sm, "mem": p.mem, "ts": p.ts} for p in s.process_util
        ]
    if s.gpm is not None:
        out["gpm"] = dict(s.gpm)
    elif "gpm" in s.errors:
        out["gpm"] = {"error": s.errors["gpm"]}
    return out


class _Torn(Exception):
    """The last line is not JSON and has no newline: a recording stopped mid-write."""

    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


def iter_trace(
    lines: Iterable[str], path: str = "<trace>"
) -> Iterator[NvmlSample | dict[str, Any]]:
    """Decode a trace line by line: the header dict first (if present), then samples. A
    last line cut short (not JSON, no newline: the recorder was stopped while it wrote)
    ends the trace with `_Torn`; a bad line anywhere else is a TraceError."""
    torn: tuple[int, str] | None = None
    for number, line in enumerate(lines, start=1):
        if torn is not None:  # a line after it: it was not the last, so not torn
            raise TraceError(path, torn[0], f"not JSON ({torn[1]})")
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if not line.endswith("\n"):
                torn = (number, exc.msg)
                continue
            raise TraceError(path, number, f"not JSON ({exc.msg})") from None
        except RecursionError:
            raise TraceError(path, number, "not a sample: nested too deep") from None
        if not isinstance(obj, dict):
            raise TraceError(path, number, "each line must be a JSON object")
        if obj.get("header") is True:
            if number != 1:
                raise TraceError(path, number, "a header is only allowed on line 1")
            yield obj
            continue
        try:
            yield sample_from_json(obj)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise TraceError(path, number, f"bad sample: {exc}") from None
    if torn is not None:
        raise _Torn(torn[0])


def parse_trace(lines: Iterable[str], path: str = "<trace>") -> Trace:
    header: dict[str, Any] = {}
    samples: list[NvmlSample] = []
    try:
        for item in iter_trace(lines, path):
            if isinstance(item, NvmlSample):
                samples.append(item)
            else:
                header = item
    except _Torn as torn:
        return Trace(header=header, samples=samples, torn_line=torn.line)
    return Trace(header=header, samples=samples)


MAX_LINE_CHARS = 64 * 2**10  # a sample of an 8-GPU host is ~4 KB


def _bounded_lines(fh: IO[str], path: str) -> Iterator[str]:
    """`fh`'s lines, each read only up to `MAX_LINE_CHARS`: a file that is no trace (one
    line of megabytes, or /dev/zero, which never ends one) is refused, not held whole."""
    number = 0
    while line := fh.readline(MAX_LINE_CHARS + 1):
        number += 1
        if len(line) > MAX_LINE_CHARS:
            raise TraceError(path, number, f"a line over {MAX_LINE_CHARS:,} characters: "
                                           "not a trace (one line per sample)")
        yield line


def read_trace(path: str | Path) -> Trace:
    """Read a trace file; a missing or malformed file raises TraceError with the fix."""
    p = Path(path)
    try:
        with p.open(encoding="utf-8") as fh:
            return parse_trace(_bounded_lines(fh, str(p)), str(p))
    except FileNotFoundError:
        raise TraceError(str(p), 0, "no such file") from None
    except UnicodeDecodeError:
        raise TraceError(str(p), 0, "not a UTF-8 text file") from None


def packaged_trace() -> Trace:
    """The real H100 recording shipped with costguard (used by the demo and `sim`)."""
    ref = resources.files("costguard.telemetry") / "data" / PACKAGED_TRACE
    with ref.open("r", encoding="utf-8") as fh:
        return parse_trace(fh, f"costguard/telemetry/data/{PACKAGED_TRACE}")


class TraceWriter:
    """Writes the header and then one line per sample, flushed so a crash loses little."""

    def __init__(self, out: IO[str], header: Mapping[str, Any] | None = None) -> None:
        self._out = out
        if header is not None:
            self._out.write(json.dumps({"header": True, **header}, default=str) + "\n")
            self._out.flush()

    def write(self, sample: NvmlSample) -> None:
        self._out.write(json.dumps(sample_to_json(sample)) + "\n")
        self._out.flush()


def write_trace(out: IO[str], trace: Trace) -> None:
    header = {k: v for k, v in trace.header.items() if k != "header"}
    writer = TraceWriter(out, header if trace.header else None)
    for s in trace.samples:
        writer.write(s)
