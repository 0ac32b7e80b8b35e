"""How long a person waits for the command line: `costguard --help` and friends, in fresh
processes (interpreter start included), as a shell runs them. Target: `--help` < 0.3 s."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import benchmark

RUNS = 7
COMMANDS = [["--help"], ["--version"], ["report", "--help"], ["agent", "--help"]]


def _entry_point() -> list[str]:
    installed = Path(sys.executable).parent / "costguard"
    if installed.exists():
        return [str(installed)]
    found = shutil.which("costguard")
    return [found] if found else [sys.executable, "-m", "costguard"]


@benchmark("cli-startup", description=(
    f"The installed `costguard` entry point, {RUNS} fresh processes per command (the median "
    "and the slowest), after one warm-up run so the files are in the page cache. "
    "Target: `costguard --help` < 0.3 s."))
def cli_startup() -> list[dict[str, object]]:
    entry = _entry_point()
    rows: list[dict[str, object]] = []
    for argv in COMMANDS:
        subprocess.run([*entry, *argv], capture_output=True, check=True)  # warm-up
        walls = []
        for _ in range(RUNS):
            t0 = time.perf_counter()
            subprocess.run([*entry, *argv], capture_output=True, check=True)
            walls.append(time.perf_counter() - t0)
        median = statistics.median(walls)
        rows.append({"command": "costguard " + " ".join(argv), "median_s": round(median, 3),
                     "max_s": round(max(walls), 3),
                     "under_0_3s": median < 0.3 if argv == ["--help"] else "-"})
    return rows
