"""The benchmark scaffold: registry, runner and BENCHMARKS.md."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import Registry
from bench.__main__ import main

REPO_ROOT = Path(__file__).resolve().parent.parent


def _registry() -> Registry:
    registry = Registry()

    @registry.register("alpha", "Alpha does sums.")
    def alpha() -> list[dict[str, object]]:
        return [{"n": 1_000, "per_second": 1234.5}, {"n": 10, "note": "a|b"}]

    @registry.register("beta")
    def beta() -> list[dict[str, object]]:
        """Beta's description comes from its docstring."""
        return [{"size": 3}]

    return registry


def _section(document: str, name: str) -> str:
    match = re.search(rf"<!-- bench:{name} -->\n(.*?)<!-- /bench:{name} -->", document,
                      re.DOTALL)
    assert match, f"no section {name} in:\n{document}"
    return match[1]


def test_report_records_command_date_machine_and_a_table_per_benchmark(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--output", str(out)], registry=_registry()) == 0
    document = out.read_text()
    assert f"| Command | `python -m bench --output {out}` |" in document
    assert re.search(r"\| Date \| \d{4}-\d\d-\d\d \d\d:\d\d UTC \|", document)
    assert f"| Python | CPython {platform.python_version()} |" in document
    assert re.search(r"\| Cores \| [1-9]\d* \|", document)
    assert re.search(r"\| RAM \| [\d.]+ GiB \|", document)
    assert re.search(r"\| CPU \| \S", document)
    alpha = _section(document, "alpha")
    assert "Alpha does sums." in alpha
    assert "| n | per_second | note |" in alpha
    assert "| 1,000 | 1,234 |  |" in alpha  # missing cells stay empty, numbers readable
    assert "| 10 |  | a\\|b |" in alpha  # a pipe in a value does not break the table
    assert "Beta's description comes from its docstring." in _section(document, "beta")
    # each run says how fast the machine ran Python around it, so runs can be compared
    pace = re.search(r"The machine's pace \(bench/_machine.py's reference work, lower is "
                     r"faster\): (\d+) ms before, (\d+) ms after\.", alpha)
    assert pace and int(pace[1]) > 0 and int(pace[2]) > 0


def test_only_reruns_the_named_benchmark_and_keeps_the_other_sections(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    main(["--output", str(out)], registry=_registry())
    before = _section(out.read_text(), "beta")

    registry = Registry()

    @registry.register("alpha")
    def alpha_again() -> list[dict[str, object]]:
        return [{"n": 7}]

    @registry.register("beta")
    def beta_must_not_run() -> list[dict[str, object]]:
        raise AssertionError("--only alpha ran beta")

    assert main(["--only", "alpha", "--output", str(out)], registry=registry) == 0
    document = out.read_text()
    assert "| 7 |" in _section(document, "alpha")
    assert f"Ran `python -m bench --only alpha --output {out}`" in _section(document, "alpha")
    assert _section(document, "beta") == before


def test_unknown_benchmark_name_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--only", "gamma", "--output", str(out)], registry=_registry()) == 2
    assert "no benchmark named gamma; known: alpha, beta" in capsys.readouterr().err
    assert not out.exists()


def test_a_failing_benchmark_is_reported_and_fails_the_run(tmp_path: Path) -> None:
    registry = _registry()

    @registry.register("broken")
    def broken() -> list[dict[str, object]]:
        raise RuntimeError("fixture exploded")

    out = tmp_path / "BENCHMARKS.md"
    assert main(["--output", str(out)], registry=registry) == 1
    document = out.read_text()
    assert "RuntimeError: fixture exploded" in _section(document, "broken")
    assert "| 1,000 |" in _section(document, "alpha")


def test_registering_two_functions_under_one_name_is_refused() -> None:
    registry = _registry()
    with pytest.raises(ValueError, match="'beta' is registered twice"):
        @registry.register("beta")
        def other() -> list[dict[str, object]]:
            return []


def test_python_m_bench_discovers_and_runs_the_model_benchmark(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "model-construction", "--output", str(out)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    section = _section(out.read_text(), "model-construction")
    rates = re.findall(r"\| Instance\S* \| 20,000 \| [\d.]+ \| ([\d,]+) \|", section)
    assert len(rates) == 2 and all(int(r.replace(",", "")) > 0 for r in rates), section


def test_the_machines_pace_is_a_fixed_work_timed() -> None:
    from bench._machine import _reference_work, pace_ms

    assert _reference_work() == _reference_work() == 80_000  # the same work every time
    assert 0 < pace_ms(repeat=1) < 60_000


def test_call_cpu_counts_the_calling_threads_cpu_inside_calls_once() -> None:
    """bench/_api_calls.py `CallCpu` (org-scale's "CPU inside the clouds' client calls"):
    the CPU a thread spends inside a timed method, by label; a timed call made inside
    another counts in the outer one only; waiting costs nothing; other threads' calls add
    up."""
    import threading
    import time

    from bench._api_calls import CallCpu

    def burn(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    class Client:
        def call(self, work: float, *, inner: float = 0.0, wait: float = 0.0) -> str:
            burn(work)
            if inner:
                self.call(inner)  # e.g. a credentials refresh inside a call
            time.sleep(wait)
            return "answer"

    cpu = CallCpu()
    cpu.patch(Client, "call", "cloud")
    client = Client()
    started = time.thread_time()
    assert client.call(0.05, inner=0.03, wait=0.2) == "answer"
    spent = time.thread_time() - started
    assert 0.08 <= cpu.seconds["cloud"] <= spent  # the inner call once, the sleep not at all
    thread = threading.Thread(target=client.call, args=(0.05,))
    thread.start()
    thread.join()
    assert 0.13 <= cpu.seconds["cloud"] <= spent + 0.08
    assert set(cpu.seconds) == {"cloud"}


def test_efficiency_week_says_how_many_verdicts_match_the_raw_rows_and_which_differ() -> None:
    from bench.efficiency_week import same_verdicts

    raw = {f"i-{n}": ["idle", True, 0, [], None] for n in range(5)}
    assert same_verdicts(raw, dict(raw)) == "5 of 5"
    other = {**raw, "i-3": ["idle", True, 0, [], "g5.xlarge"], "i-4": ["busy", False, 1, [0],
                                                                      None]}
    del other["i-0"]  # not judged at all
    assert same_verdicts(raw, other) == "2 of 5 (differ: i-0, i-3, i-4)"
    assert same_verdicts(raw, {}).endswith("(differ: i-0, i-1, i-2, ...)")
