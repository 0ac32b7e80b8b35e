"""The build scripts behind `make test` and .ci/run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg import PostgresUnavailable, find_binaries

REPO_ROOT = Path(__file__).resolve().parent.parent
ENSURE_POSTGRES = REPO_ROOT / "scripts" / "ensure-postgres.sh"
ENSURE_VENV = REPO_ROOT / "scripts" / "ensure-venv.sh"


def _run(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in {"CI", "COSTGUARD_PG_BINDIR"}}
    return subprocess.run(
        ["bash", str(script), *args], env={**base, **env}, capture_output=True, text=True,
        timeout=120, check=False, cwd=REPO_ROOT,
    )


def test_ensure_postgres_finds_the_same_binaries_as_the_test_harness() -> None:
    try:
        expected = find_binaries().bindir
    except PostgresUnavailable as exc:
        pytest.skip(f"PostgreSQL unavailable: {exc}")
    done = _run(ENSURE_POSTGRES)
    assert done.returncode == 0, done.stderr
    found = Path(done.stdout.strip().splitlines()[-1].split(": ", 1)[1])
    assert found.resolve() == expected.resolve()


def test_missing_postgres_is_a_loud_warning_outside_ci(tmp_path: Path) -> None:
    done = _run(ENSURE_POSTGRES, COSTGUARD_PG_BINDIR=str(tmp_path))
    assert done.returncode == 0
    assert "WARNING: PostgreSQL server binaries not found" in done.stderr
    assert "will be SKIPPED" in done.stderr


def test_missing_postgres_fails_under_ci(tmp_path: Path) -> None:
    done = _run(ENSURE_POSTGRES, COSTGUARD_PG_BINDIR=str(tmp_path), CI="true")
    assert done.returncode == 1
    assert "CI=true: the run FAILS" in done.stderr


def test_ensure_venv_creates_a_working_venv_once(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # --without-pip: ensurepip alone would take 10 s on two cores.
    done = _run(ENSURE_VENV, str(venv), PYTHON=sys.executable, VENV_ARGS="--without-pip")
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import sys; print(sys.prefix)"],
                           capture_output=True, text=True, check=True)
    assert Path(probe.stdout.strip()) == venv
    created = python.lstat().st_mtime_ns
    assert _run(ENSURE_VENV, str(venv), PYTHON=sys.executable).returncode == 0
    assert python.lstat().st_mtime_ns == created  # a healthy venv is left alone


def test_ensure_venv_refuses_a_python_older_than_3_11(tmp_path: Path) -> None:
    old_python = tmp_path / "python3.9"
    old_python.write_text('#!/bin/sh\n[ "$1" = -V ] && echo "Python 3.9.2" && exit 0\nexit 1\n')
    old_python.chmod(0o755)
    done = _run(ENSURE_VENV, str(tmp_path / "venv"), PYTHON=str(old_python))
    assert done.returncode == 1
    assert "needs Python >= 3.11, but" in done.stderr and "Python 3.9.2" in done.stderr
    assert not (tmp_path / "venv").exists()


def test_ensure_prometheus_finds_the_binaries_the_kubernetes_tests_start() -> None:
    from tests.prom import PrometheusUnavailable, binaries

    try:
        server, tool = binaries()
    except PrometheusUnavailable as exc:
        pytest.skip(str(exc))
    done = _run(REPO_ROOT / "scripts" / "ensure-prometheus.sh")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"Prometheus: {server}, promtool: {tool}"


def test_ensure_jemalloc_finds_the_library_the_image_preloads() -> None:
    from costguard.heap import jemalloc_installed

    if not jemalloc_installed():
        pytest.skip("jemalloc not installed here")
    done = _run(REPO_ROOT / "scripts" / "ensure-jemalloc.sh")
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("jemalloc: /") and last.endswith("libjemalloc.so.2")


# each ensure script with what it looks for made missing: its own override pointing nowhere,
# or (jemalloc) an ldconfig that lists nothing
MISSING = {
    "chromium": ({"COSTGUARD_CHROMIUM": "/nonexistent/chromium"}, "headless Chromium",
                 "The console's browser tests will be SKIPPED ('Chromium unavailable')"),
    "prometheus": ({"COSTGUARD_PROMETHEUS": "/nonexistent/prometheus"}, "Prometheus",
                   "The Kubernetes tests will be SKIPPED ('Prometheus unavailable')"),
    "jemalloc": ({}, "jemalloc", "The tests of the image's allocator will be SKIPPED"),
}


@pytest.mark.parametrize("name", sorted(MISSING))
def test_each_ensure_script_warns_when_it_cannot_install_and_fails_under_ci(
        name: str, tmp_path: Path) -> None:
    """Not root (a fake `id`): nothing is installed; a loud warning and the tests skip, or
    under CI=true the run fails (scripts/ensure-lib.sh, shared by every ensure script)."""
    env, what, skipped = MISSING[name]
    for tool, body in (("id", "echo 1000"), ("ldconfig", "exit 0")):
        fake = tmp_path / tool
        fake.write_text(f"#!/bin/sh\n{body}\n")
        fake.chmod(0o755)
    path = f"{tmp_path}:{os.environ['PATH']}"
    script = REPO_ROOT / "scripts" / f"ensure-{name}.sh"
    done = _run(script, PATH=path, **env)
    assert done.returncode == 0, done.stderr
    assert f"WARNING: {what}" in done.stderr
    assert "Not root, so it cannot be installed automatically." in done.stderr
    assert skipped in done.stderr
    done = _run(script, PATH=path, CI="true", **env)
    assert done.returncode == 1
    assert "CI=true: the run FAILS rather than skip" in done.stderr
