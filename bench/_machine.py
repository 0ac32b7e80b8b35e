"""What machine a benchmark ran on, read from /proc and the interpreter."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Machine:
    cpu_model: str
    cores: int
    ram_gib: float | None
    python: str
    os: str

    def rows(self) -> list[tuple[str, str]]:
        ram = f"{self.ram_gib:.1f} GiB" if self.ram_gib is not None else "unknown"
        return [
            ("CPU", self.cpu_model),
            ("Cores", str(self.cores)),
            ("RAM", ram),
            ("Python", self.python),
            ("OS", self.os),
        ]


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        # x86 says "model name"; some ARM kernels only give "Hardware" or "Model".
        if key.strip() in {"model name", "Hardware", "Model"} and value.strip():
            return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def _ram_gib(meminfo: str) -> float | None:
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / (1024 * 1024)  # the value is in KiB
    return None


def _os_name(os_release: str) -> str:
    pretty = ""
    for line in os_release.splitlines():
        if line.startswith("PRETTY_NAME="):
            pretty = line.split("=", 1)[1].strip().strip('"')
    kernel = f"{platform.system()} {platform.release()}"
    return f"{pretty}, {kernel}" if pretty else kernel


def describe_machine() -> Machine:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return Machine(
        cpu_model=_cpu_model(_read("/proc/cpuinfo")),
        cores=cores or 1,
        ram_gib=_ram_gib(_read("/proc/meminfo")),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        os=_os_name(_read("/etc/os-release")),
    )


def _reference_work() -> int:
    """A fixed mix of what a cycle's Python does (objects built, hashed, sorted, encoded and
    parsed back): the same work on every run, so only the machine's pace changes its time."""
    rows: list[dict[str, object]] = []
    by_zone: dict[str, list[float]] = {}
    for n in range(40_000):
        zone, util = f"z-{n % 7}", (n * 37) % 101 / 1.0
        rows.append({"id": f"i-{n:017x}", "zone": zone, "util": util,
                     "tags": {"team": f"t{n % 13}", "env": "prod" if n % 3 else "dev"}})
        by_zone.setdefault(zone, []).append(util)
    ordered = sorted(rows, key=lambda r: (str(r["zone"]), str(r["id"])))
    back = json.loads(json.dumps(ordered))
    return len(back) + sum(len(v) for v in by_zone.values())


def pace_ms(repeat: int = 3) -> float:
    """The fastest of `repeat` runs of the reference work, in milliseconds: how fast this
    machine runs Python right now. A shared machine's pace moves from hour to hour (by 10-30 %
    on the 2-core machines these figures come from), which moves every CPU and wall figure
    of a benchmark with it; lower is faster."""
    best = float("inf")
    for _ in range(repeat):
        started = time.thread_time()
        _reference_work()
        best = min(best, time.thread_time() - started)
    return round(best * 1000, 1)
