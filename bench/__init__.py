"""costguard benchmarks: a small registry and a runner that writes BENCHMARKS.md.

Run them all with `make bench` (or `python -m bench`), one with `python -m bench --only NAME`,
list them with `python -m bench --list`. Each run rewrites the sections it ran in
BENCHMARKS.md (the others stay as they were) and records the command, the date and the
machine (CPU model, cores, RAM, Python, OS).

Adding a benchmark: create a module `bench/<topic>.py` (any name not starting with `_`; the
runner imports every such module) and register a function that takes no arguments and
returns rows, one mapping per table row, keys in column order:

    from bench import benchmark

    @benchmark("policy-evaluation", description="Evaluate idle-gpu.yml over a simulated fleet.")
    def policy_evaluation() -> list[dict[str, object]]:
        rows = []
        for fleet in (100, 1_000, 10_000):
            started = time.perf_counter()
            ...  # the work being measured
            seconds = time.perf_counter() - started
            rows.append({"instances": fleet, "seconds": seconds, "per_second": fleet / seconds})
        return rows

The runner times the whole function too and prints that beside the table. Keep a benchmark
under a minute on 2 cores, use only loopback for servers, and measure with
`time.perf_counter()`. A benchmark that raises is reported in its section and makes the run
exit 1; the others still run.
"""

from __future__ import annotations

from bench._registry import REGISTRY, Benchmark, BenchmarkFunc, Registry, Row, benchmark

__all__ = ["REGISTRY", "Benchmark", "BenchmarkFunc", "Registry", "Row", "benchmark"]
