"""`python -m bench [--only NAME ...] [--list] [--output BENCHMARKS.md]`."""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench._machine import describe_machine, pace_ms
from bench._registry import REGISTRY, Registry, discover, run
from bench._report import render_document


def main(argv: list[str] | None = None, registry: Registry | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--output", type=Path, default=Path("BENCHMARKS.md"),
                        help="the Markdown file to update (default: BENCHMARKS.md)")
    args = parser.parse_args(args_list)

    if registry is None:
        discover()
        registry = REGISTRY
    if args.list:
        for bench in registry.select():
            print(f"{bench.name:30} {bench.description}")
        return 0
    try:
        selected = registry.select(args.only)
    except LookupError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2

    command = shlex.join(["python", "-m", "bench", *args_list])
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    outcomes = []
    for bench in selected:
        print(f"running {bench.name} ...", flush=True)
        outcome = run(bench, pace_ms)
        status = "FAILED" if outcome.error else "ok"
        print(f"  {status} in {outcome.seconds:.2f} s", flush=True)
        if outcome.error:
            print(outcome.error, file=sys.stderr)
        outcomes.append(outcome)

    previous = args.output.read_text() if args.output.exists() else ""
    args.output.write_text(
        render_document(outcomes, previous, command, date, describe_machine()))
    print(f"wrote {args.output}")
    return 1 if any(outcome.error for outcome in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
