"""The README's `make demo` sample, made from a real run (`python scripts/readme_demo.py`
rewrites it between the README's demo-sample markers; tests/test_readme_demo.py runs the
demo the same way and fails when the README no longer shows what it prints).

The run is the demo as `make demo` runs it (the shipped policies, 48 hours of the seeded
fleet), on a clock pinned to END so the weekday and dates are the same on any day. The
sample keeps its first lines, the first events of each kind, the summary and the head of
the team table, the simulated cluster's workloads and its namespace table; the wall time of
the run, its only figure that changes, is compared as
"N s".
"""

from __future__ import annotations

import io
import re
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
END = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)  # a Monday noon: the run's last cycle
START_MARK, END_MARK = "<!-- demo-sample -->", "<!-- /demo-sample -->"
WIDTH = 100
# the more particular first: a scale-in is a STOP line too
_KINDS = ("removed from asg", "is idle but asg", " STOP ", " warn ", " note ")


def demo_output() -> str:
    """What `costguard demo` prints, run on the pinned clock into a throwaway store."""
    from rich.console import Console

    from costguard.config import Settings
    from costguard.demo.run import demo_clock, run_demo

    buf = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{Path(tmp) / 'demo.db'}",
                            policy_paths=[ROOT / "policies"])
        run_demo(settings, Console(file=buf, width=WIDTH, no_color=True,
                                   highlight=False, soft_wrap=True),
                 hours=48, clock=demo_clock(END, 48))
    return buf.getvalue()


def sample(output: str) -> list[str]:
    """The lines the README shows of one run's output."""
    lines = [line.rstrip() for line in output.splitlines()]
    out = [lines[0].replace(str(ROOT / "policies"), "policies")
           .replace(str(ROOT / "costguard" / "examples" / "policies"), "policies")]
    taken: set[str] = set()
    for line in lines:
        kind = next((k for k in _KINDS if k in line), None)
        if kind is not None and kind not in taken and re.match(r"^\w{3} \d\d:\d\d ", line):
            taken.add(kind)
            out.append(line)
    out.append("...")
    start = next(i for i, line in enumerate(lines) if re.match(r"^\d+ cycles in ", line))
    end = next(i for i, line in enumerate(lines) if line.startswith("Spend nobody"))
    out += lines[start:end + 1]
    out.append("")
    table = next(i for i, line in enumerate(lines) if line.startswith("Spend by team"))
    head = [line for line in lines[table + 1:table + 12] if line.strip()]
    out += [*head[:6], " ..."]
    # the simulated GPU cluster: each workload's line, and its namespace table
    out += ["", *(line for line in lines if line.startswith("Kubernetes ") and ":" in line
                  and "GPU spend" not in line)]
    table = next(i for i, line in enumerate(lines)
                 if line.startswith("Kubernetes GPU spend by namespace"))
    out += ["", *[line for line in lines[table:table + 15] if line.strip()][:14]]
    return out


def normalized(line: str) -> str:
    """A line without what differs between runs: the wall time."""
    return re.sub(r"^(\d+ cycles in )[\d.]+ s", r"\1N s", line)


def readme_sample(text: str) -> list[str]:
    """The sample as the README holds it (between the markers, inside the code fence)."""
    block = text.split(START_MARK, 1)[1].split(END_MARK, 1)[0]
    body = block.split("```", 2)[1]
    return [line.rstrip() for line in body.splitlines()[1:]]


def main() -> None:
    lines = sample(demo_output())
    text = README.read_text(encoding="utf-8")
    if START_MARK not in text:
        sys.exit(f"{README}: no {START_MARK} ... {END_MARK} block to fill")
    before, rest = text.split(START_MARK, 1)
    after = rest.split(END_MARK, 1)[1]
    block = "\n```\n" + "\n".join(lines) + "\n```\n"
    README.write_text(before + START_MARK + block + END_MARK + after, encoding="utf-8")
    print(f"README.md: the demo sample rewritten ({len(lines)} lines)")


if __name__ == "__main__":
    main()
