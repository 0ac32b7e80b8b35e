"""BENCHMARKS.md: a machine header and one Markdown section per benchmark.

Sections are fenced by HTML comments so a run of some benchmarks (`--only`) replaces just
their sections and keeps the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from bench._machine import Machine
from bench._registry import Outcome

_SECTION = re.compile(r"<!-- bench:(?P<name>[^ ]+) -->\n.*?<!-- /bench:(?P=name) -->\n",
                      re.DOTALL)


def format_value(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        magnitude = abs(value)
        if magnitude >= 100:
            return f"{value:,.0f}"
        if magnitude >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Iterable[Mapping[str, object]]) -> str:
    rows = list(rows)
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    if not columns:
        return "_(no rows)_\n"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(format_value(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def render_section(outcome: Outcome, command: str, date: str) -> str:
    bench = outcome.benchmark
    parts = [f"<!-- bench:{bench.name} -->", f"## {bench.name}", ""]
    if bench.description:
        parts += [bench.description, ""]
    ran = f"Ran `{command}` on {date}; the benchmark took {outcome.seconds:.2f} s."
    if outcome.pace_ms is not None:
        before, after = outcome.pace_ms
        ran += (f" The machine's pace (bench/_machine.py's reference work, lower is faster): "
                f"{before:.0f} ms before, {after:.0f} ms after.")
    parts += [ran, ""]
    if outcome.error is not None:
        parts += ["**FAILED:**", "", "```", outcome.error.rstrip(), "```", ""]
    else:
        parts.append(markdown_table(outcome.rows))
    parts.append(f"<!-- /bench:{bench.name} -->")
    return "\n".join(parts) + "\n"


def sections_of(document: str) -> dict[str, str]:
    return {match["name"]: match[0] for match in _SECTION.finditer(document)}


def render_document(
    outcomes: list[Outcome], previous: str, command: str, date: str, machine: Machine
) -> str:
    sections = sections_of(previous)
    for outcome in outcomes:
        sections[outcome.benchmark.name] = render_section(outcome, command, date)
    header = [
        "# Benchmarks",
        "",
        "Written by `python -m bench` (`make bench`); do not edit by hand, rerun it.",
        "Each section says which command produced it and when; the machine below is the one",
        "of the latest run.",
        "",
        "| Latest run | |",
        "|---|---|",
        f"| Command | `{command}` |",
        f"| Date | {date} |",
        *(f"| {key} | {format_value(value)} |" for key, value in machine.rows()),
        "",
    ]
    body = [sections[name] for name in sorted(sections)]
    return "\n".join(header) + "\n" + "\n".join(body)
