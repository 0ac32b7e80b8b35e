"""A new user's first hour, from the built wheel (#20): installed into a new virtualenv in a
temp directory, run from a scratch directory that is not a checkout, following the
README's quick start: init, validate, demo, report, explain, one cycle.

The wheel is built from this tree and installed without its dependencies; the new
environment reads those from the test environment's site-packages through a path entry (no
network, and the checkout's editable install is not on that path: what runs is the wheel)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import costguard

REPO = Path(__file__).resolve().parents[2]


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300,
         ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if ok:
        assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n" \
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A virtualenv holding the wheel alone, and the environment a new user's shell has."""
    root = tmp_path_factory.mktemp("fresh-user")
    dist, venv = root / "dist", root / "venv"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          "-w", str(dist), str(REPO)], REPO, dict(os.environ))
    (wheel,) = dist.glob("costguard_gpu-*.whl")  # the distribution's own name
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root, dict(os.environ))
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
          "--no-index", str(wheel)], root, dict(os.environ))
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                         "['purelib'])"], root, {}).stdout.strip())
    # the dependencies: the test environment's packages, as a plain path (its .pth files,
    # the editable install's among them, are not processed)
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COSTGUARD_", "PYTHON"))}
    env.update(PATH=f"{venv / 'bin'}:/usr/bin:/bin", HOME=str(root), COLUMNS="80",
               NO_COLOR="1")
    return venv, env


def test_the_wheel_is_what_runs(installed: tuple[Path, dict[str, str]],
                                tmp_path: Path) -> None:
    venv, env = installed
    where = _run([str(venv / "bin" / "python"), "-c", "import costguard; "
                  "print(costguard.__file__)"], tmp_path, env).stdout.strip()
    assert where.startswith(str(venv)), where
    assert _run(["costguard", "--version"], tmp_path, env).stdout.strip() == \
        f"costguard {costguard.__version__}"


def test_the_quick_start_works_from_a_scratch_directory(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    _, env = installed
    out = _run(["costguard", "init", "cg"], tmp_path, env).stdout
    home = tmp_path / "cg"
    assert (home / "costguard.yaml").is_file() and "Next:" in out
    policies = sorted(p.name for p in (home / "policies").iterdir())
    assert policies, "init wrote no policies"
    _run(["costguard", "validate", "policies"], home, env)

    demo = _run(["costguard", "demo", "--hours", "12"], home, env).stdout
    assert "cycles in" in demo and "team" in demo
    assert (home / "costguard-demo.db").is_file()
    assert not (home / "costguard.db").exists()  # the demo never writes the configured store

    db = ["costguard", "--database", "costguard-demo.db"]
    report = json.loads(_run([*db, "report", "--by", "team", "--format", "json"],
                             home, env).stdout)
    assert report["total"]["cost_usd"] > 0 and report["rows"]
    by_instance = json.loads(_run([*db, "report", "--by", "instance", "--format", "json"],
                                  home, env).stdout)
    instance = by_instance["rows"][0]["instance"]
    explained = _run([*db, "explain", instance], home, env).stdout
    assert instance in explained and "idle-gpu-shutdown" in explained
    # the example policies are dry-run in their files, and the demo ran them enforced:
    # explain says so before it shows them as `enforce`
    assert "Policies: the demo's, as it ran them: every one enforced" in explained
    assert "idle-gpu-shutdown (enforce)" in explained
    assert "mode: dry-run" in (home / "policies" / "idle-gpu.yml").read_text()
    table = _run([*db, "report", "--by", "team"], home, env).stdout
    assert max(len(line) for line in table.splitlines()) <= 80

    cycle = _run(["costguard", "run", "--once"], home, env).stdout
    assert cycle.startswith("cycle 1 at ") and "{" not in cycle  # sentences, not a repr
    assert (home / "costguard.db").is_file()


def test_a_first_mistake_gets_a_one_line_answer(installed: tuple[Path, dict[str, str]],
                                                tmp_path: Path) -> None:
    _, env = installed
    done = _run(["costguard", "run", "--once"], tmp_path, env, ok=False)  # no init yet
    assert done.returncode == 2
    assert "costguard init" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "costguard.db").exists()
