"""Benchmarks registered by name, and discovery of the modules that register them."""

from __future__ import annotations

import importlib
import pkgutil
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

Row = Mapping[str, object]
BenchmarkFunc = Callable[[], Iterable[Row]]


@dataclass(frozen=True)
class Benchmark:
    name: str
    func: BenchmarkFunc
    description: str = ""


@dataclass(frozen=True)
class Outcome:
    """One benchmark's run: its rows, how long the whole function took, or what went wrong."""

    benchmark: Benchmark
    rows: list[dict[str, object]]
    seconds: float
    error: str | None = None
    pace_ms: tuple[float, float] | None = None  # the machine's pace before and after (ms)


@dataclass
class Registry:
    benchmarks: dict[str, Benchmark] = field(default_factory=dict)

    def register(self, name: str, description: str = "") -> Callable[[BenchmarkFunc],
                                                                      BenchmarkFunc]:
        def decorate(func: BenchmarkFunc) -> BenchmarkFunc:
            if name in self.benchmarks and self.benchmarks[name].func is not func:
                raise ValueError(f"benchmark {name!r} is registered twice; names must be unique")
            doc = description or (func.__doc__ or "").strip().split("\n", 1)[0]
            self.benchmarks[name] = Benchmark(name=name, func=func, description=doc)
            return func

        return decorate

    def select(self, only: Iterable[str] | None = None) -> list[Benchmark]:
        if not only:
            return [self.benchmarks[name] for name in sorted(self.benchmarks)]
        wanted = list(only)
        unknown = [name for name in wanted if name not in self.benchmarks]
        if unknown:
            known = ", ".join(sorted(self.benchmarks)) or "(none)"
            raise LookupError(f"no benchmark named {', '.join(unknown)}; known: {known}")
        return [self.benchmarks[name] for name in wanted]


REGISTRY = Registry()


def benchmark(name: str, *, description: str = "") -> Callable[[BenchmarkFunc], BenchmarkFunc]:
    """Register `func` under `name` in the default registry (see the package docstring)."""
    return REGISTRY.register(name, description)


def discover(package: str = "bench") -> None:
    """Import every module of `package` whose name does not start with `_`."""
    root = importlib.import_module(package)
    for module in pkgutil.iter_modules(root.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{package}.{module.name}")


def run(bench: Benchmark, pace: Callable[[], float] | None = None) -> Outcome:
    """Run `bench`; with `pace`, the machine's pace is measured before and after it."""
    before = pace() if pace is not None else None
    started = time.perf_counter()
    try:
        rows = [dict(row) for row in bench.func()]
    except Exception:
        return Outcome(bench, [], time.perf_counter() - started, traceback.format_exc())
    seconds = time.perf_counter() - started
    paced = (before, pace()) if pace is not None and before is not None else None
    return Outcome(bench, rows, seconds, pace_ms=paced)
