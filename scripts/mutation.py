"""Mutation testing of costguard's safety core, one module against its own test folder.

    python scripts/mutation.py                 # every mutant of every module; rewrites MUTATION.md
    python scripts/mutation.py --sample 15     # 15 mutants per module (seeded); what CI runs
    python scripts/mutation.py --module costguard/actions/safety.py   # one module only
    python scripts/mutation.py --report         # MUTATION.md from the results in .mutation/

The modules and the test folder that must guard each one are `[tool.costguard.mutation]` in
pyproject.toml. mutmut reads its own settings from the pyproject.toml of the directory it runs
in, so each module gets a work directory under .mutation/ whose pyproject.toml is this
project's with `[tool.mutmut]` set for that module alone; mutmut copies the sources and tests
into `mutants/` there and runs, per mutant, only the tests of that folder which reach the
mutated function (pytest in a forked process, slow tests left out). PostgreSQL tests run only
for the modules listed in `postgres` (code with a PostgreSQL-only path): the driver starts one
throwaway server for the whole run and every pytest process attaches to it.

A surviving mutant is either a test to write or a change that cannot be observed. The second
kind is judged in scripts/mutation-equivalents.toml (module, function, the change as
MUTATION.md prints it, and why); with --check, any survivor not judged there fails the run,
except in the modules listed as `pending` (measured and reported by full runs, not yet
gated; a sampled check such as CI's leaves them out).

A module listed in `full_sample` is measured on that many seeded mutants even in a full run
(its whole set takes hours: every mutant of the act stage runs the engine scenarios); the
report says so next to its score.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mutmut.stats import status_by_exit_code  # exit code -> status, as mutmut reports

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"
EQUIVALENTS = ROOT / "scripts" / "mutation-equivalents.toml"
KILLED = {"killed", "timeout", "caught by type check"}


@dataclass
class Mutant:
    name: str
    status: str
    function: str = ""
    change: str = ""
    why: str | None = None  # the judgment, when one matches


@dataclass
class ModuleResult:
    module: str
    tests: list[str]
    mutants: list[Mutant] = field(default_factory=list)
    generated: int = 0  # all the mutants of the module (more than `mutants` when sampled)

    @property
    def killed(self) -> int:
        return sum(m.status in KILLED for m in self.mutants)

    @property
    def survivors(self) -> list[Mutant]:
        return [m for m in self.mutants if m.status not in KILLED]

    @property
    def score(self) -> float:
        return self.killed / len(self.mutants) if self.mutants else 1.0


@functools.cache
def settings() -> dict[str, Any]:
    """`[tool.costguard.mutation]`, read once per run."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    table: dict[str, Any] = data["tool"]["costguard"]["mutation"]
    return table


def slug(module: str) -> str:
    return module.removeprefix("costguard/").removesuffix(".py").replace("/", "-")


def with_postgres(module: str) -> bool:
    return module in settings().get("postgres", [])


def prepare(module: str, tests: list[str]) -> Path:
    """The module's work directory: links to the sources and tests, a pyproject.toml of its own."""
    work = WORK / slug(module)
    if work.exists():  # every run starts afresh: earlier results would not see new tests
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    conf = settings()
    for name in ["costguard", "tests", *conf.get("also_copy", [])]:
        link = work / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    text = (ROOT / "pyproject.toml").read_text()
    head = text.split("\n[tool.mutmut]")[0]
    mutmut = {
        "source_paths": ["costguard"],
        "only_mutate": [module],
        "also_copy": conf.get("also_copy", []),
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-p", "no:xdist", "-m",
                                "not slow" if with_postgres(module) else
                                "not postgres and not slow"],
    }
    body = "\n".join(f"{key} = {json.dumps(value)}" for key, value in mutmut.items())
    (work / "pyproject.toml").write_text(f"{head}\n[tool.mutmut]\n{body}\n")
    return work


def in_work(work: Path, code: str, *args: str) -> str:
    """Run a snippet of Python in the work directory (mutmut reads its settings from the cwd)."""
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=work, check=True,
                          capture_output=True, text=True)
    return done.stdout


GENERATE = """
from mutmut.__main__ import (copy_also_copy_files, copy_src_dir, create_mutants,
                             setup_source_paths)
copy_src_dir(); copy_also_copy_files(); setup_source_paths(); create_mutants(2)
"""

DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
print(json.dumps({name: get_diff_for_mutant(name, path=sys.argv[1]) for name in sys.argv[2:]}))
"""


def meta_path(work: Path, module: str) -> Path:
    return work / "mutants" / f"{module}.meta"


def recorded(work: Path, module: str) -> dict[str, int | None]:
    path = meta_path(work, module)
    if not path.exists():
        return {}
    codes: dict[str, int | None] = json.loads(path.read_text())["exit_code_by_key"]
    return codes


def run_mutmut(work: Path, names: list[str], jobs: int) -> None:
    cmd = [str(Path(sys.executable).parent / "mutmut"), "run", "--max-children", str(jobs), *names]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise SystemExit(f"mutmut failed in {work} (exit {done.returncode}):\n{tail}")


def function_of(name: str) -> str:
    local = name.rsplit(".", 1)[-1].rsplit("__mutmut_", 1)[0]
    return local.removeprefix("x").lstrip("_ǁ").replace("ǁ", ".") if "ǁ" in local \
        else local.removeprefix("x_")


def change_of(diff: str) -> str:
    minus = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-") and
             not ln.startswith("---")]
    plus = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and
            not ln.startswith("+++")]
    return f"{' '.join(minus)} -> {' '.join(plus)}"


def judgments() -> dict[tuple[str, str, str], str]:
    if not EQUIVALENTS.exists():
        return {}
    data = tomllib.loads(EQUIVALENTS.read_text())
    return {(e["module"], e["function"], e["change"]): e["why"] for e in data.get("equivalent", [])}


def sampled(work: Path, module: str, sample: int, seed: int) -> list[str]:
    """`sample` mutant names of the module, the same for the same seed and source."""
    every = sorted(recorded(work, module))
    return sorted(random.Random(f"{seed}:{module}").sample(every, min(sample, len(every))))


def mutate(module: str, tests: list[str], *, sample: int, seed: int, jobs: int) -> ModuleResult:
    work = prepare(module, tests)
    names: list[str] = []
    if sample:
        in_work(work, GENERATE)
        names = sampled(work, module, sample, seed)
    with postgres_for(module):
        run_mutmut(work, names, jobs)
    return collect(work, module, tests, names)


@contextlib.contextmanager
def postgres_for(module: str) -> Iterator[None]:
    """One throwaway PostgreSQL server for the module's whole run (tests/pg.py), when the
    module is listed in `postgres`: its address goes to every pytest process mutmut starts."""
    if not with_postgres(module):
        yield
        return
    sys.path.insert(0, str(ROOT))
    pg: Any = importlib.import_module("tests.pg")
    server = pg.start_throwaway_postgres()
    os.environ[pg.ATTACH_ENV] = f"{server.host}:{server.port}"
    try:
        yield
    finally:
        del os.environ[pg.ATTACH_ENV]
        server.stop()


def collect(work: Path, module: str, tests: list[str], names: list[str]) -> ModuleResult:
    """The recorded results of `names` (all when empty), survivors with their change and
    judgment."""
    codes = recorded(work, module)
    chosen = names or sorted(codes)
    result = ModuleResult(module, tests, [Mutant(n, status_by_exit_code[codes.get(n)])
                                          for n in chosen], generated=len(codes))
    survivors = result.survivors
    if survivors:
        diffs = json.loads(in_work(work, DIFFS, str(Path(module)), *[m.name for m in survivors]))
        judged = judgments()
        for m in survivors:
            m.function = function_of(m.name)
            m.change = change_of(diffs[m.name])
            m.why = judged.get((module, m.function, m.change))
    return result


def markdown(results: list[ModuleResult], command: str, target: float,
             unmeasured: list[str]) -> str:
    lines = [
        "# Mutation testing of the safety core",
        "",
        f"Command: {command if command.startswith('`') else f'`{command}`'}  ",
        f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, mutmut {mutmut_version()}",
        "",
        "Each module is mutated alone and judged by the tests of its own folder only "
        "(slow tests left out; PostgreSQL tests too, except where the tests column says "
        "+PostgreSQL): a mutant is killed when one of them fails. "
        "Score = killed / mutants; a survivor counts against the score even when it is judged "
        "equivalent, and each is listed below with the judgment from "
        "`scripts/mutation-equivalents.toml`.",
        "",
        "| module | tests | mutants | killed | survived | equivalent | score |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        equivalent = sum(m.why is not None for m in r.survivors)
        mark = "" if r.score >= target else " (below target)"
        count = (f"{len(r.mutants)} of {r.generated} (seeded sample)"
                 if len(r.mutants) < r.generated else str(len(r.mutants)))
        tests = ", ".join(r.tests) + (" +PostgreSQL" if with_postgres(r.module) else "")
        lines.append(f"| `{r.module}` | {tests} | {count} | {r.killed} | "
                     f"{len(r.survivors)} | {equivalent} | {r.score:.0%}{mark} |")
    if unmeasured:
        lines += ["", "Not measured yet (no complete run): "
                  + ", ".join(f"`{m}`" for m in unmeasured) + "."]
    for r in results:
        if not r.survivors:
            continue
        lines += ["", f"## Survivors in `{r.module}`", ""]
        for m in r.survivors:
            verdict = f"equivalent: {m.why}" if m.why else "NOT JUDGED: a test is missing"
            lines.append(f"- `{m.function}` ({m.status}): `{m.change}`  \n  {verdict}")
    return "\n".join(lines) + "\n"


def mutmut_version() -> str:
    from importlib.metadata import version

    return version("mutmut")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", action="append", help="only this module (repeatable)")
    parser.add_argument("--sample", type=int, default=0, help="mutants per module (0 = all)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a survivor is not judged equivalent")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the report (default MUTATION.md on a full run)")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: report the results already in .mutation/")
    args = parser.parse_args(argv)
    conf = settings()
    modules: dict[str, list[str]] = conf["modules"]
    pending: list[str] = conf.get("pending", [])
    # a sampled check (CI) runs the gated modules; the pending ones are measured by full runs
    chosen = args.module or [m for m in modules
                             if not (args.sample and args.check and m in pending)]
    unknown = [m for m in chosen if m not in modules]
    if unknown:
        parser.error(f"not in [tool.costguard.mutation.modules]: {', '.join(unknown)}")
    seed = conf.get("seed", 0) if args.seed is None else args.seed
    full_sample: dict[str, int] = conf.get("full_sample", {})
    results = []
    unmeasured: list[str] = []
    for module in chosen:
        sample = args.sample or full_sample.get(module, 0)
        if args.report:
            work = WORK / slug(module)
            names = sampled(work, module, sample, seed) if sample and meta_path(
                work, module).exists() else []
            codes = recorded(work, module)
            if not codes or any(codes.get(n) is None for n in (names or codes)):
                print(f"mutation: no complete run of {module} in {work}", flush=True)
                unmeasured.append(module)
                continue
            result = collect(work, module, modules[module], names)
        else:
            print(f"mutation: {module} against {', '.join(modules[module])} ...", flush=True)
            result = mutate(module, modules[module], sample=sample, seed=seed, jobs=args.jobs)
        not_judged = sum(m.why is None for m in result.survivors)
        print(f"  {len(result.mutants)} mutants, {result.killed} killed ({result.score:.0%}), "
              f"{len(result.survivors)} survived, {not_judged} not judged", flush=True)
        results.append(result)
    command = "python scripts/mutation.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.report:
        command = (f"`{command.strip()}` (assembled from the per-module runs in .mutation/, "
                   "each `python scripts/mutation.py --module MODULE`)")
    out = args.out or (ROOT / "MUTATION.md" if not args.sample and not args.module else None)
    if args.report and out is None:
        out = ROOT / "MUTATION.md"
    report = markdown(results, command.strip(), float(conf.get("target", 0.9)), unmeasured)
    if out:
        out.write_text(report)
        print(f"mutation: wrote {out}")
    unjudged = [(r.module, m) for r in results for m in r.survivors
                if m.why is None and r.module not in pending]
    for module, m in unjudged:
        print(f"  survived: {module} {m.function}: {m.change}")
    for module in pending:
        if module in chosen:
            print(f"  (not gated yet: {module}; its survivors are listed in the report)")
    if args.check and unjudged:
        print(f"mutation: {len(unjudged)} surviving mutant(s) not judged equivalent "
              f"(see above; kill each with a test, or judge it in {EQUIVALENTS.name})")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
