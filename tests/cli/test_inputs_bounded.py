"""Inputs that cannot exhaust the process: oversized policy and config files are refused
before they are read, and a malformed database URL is a one-line error naming what is
wrong, never a traceback, never the password."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from costguard.config import MAX_CONFIG_BYTES, load_settings
from costguard.errors import ConfigError
from costguard.policy.load import MAX_POLICY_BYTES, validate_paths
from costguard.store.db import check_url

TRACE = str(Path(__file__).resolve().parents[2] / "costguard/telemetry/data/h100_phases.jsonl")


def _big(path: Path, size: int) -> Path:
    line = "# " + "x" * 98 + "\n"
    path.write_text("policies:\n" + line * (size // len(line) + 1), encoding="utf-8")
    return path


def test_an_oversized_policy_file_is_refused_at_once(tmp_path: Path) -> None:
    path = _big(tmp_path / "huge.yml", 20 * 2**20)
    t0 = time.perf_counter()
    [error] = validate_paths([path])
    assert time.perf_counter() - t0 < 1.0  # it used to take 205 s and 2.5 GB
    assert (error.line, error.column) == (1, 1)
    assert f"{MAX_POLICY_BYTES:,}-byte limit" in error.message and "split it" in error.message


def test_an_oversized_config_file_is_refused(tmp_path: Path) -> None:
    path = _big(tmp_path / "costguard.yaml", MAX_CONFIG_BYTES + 1)
    with pytest.raises(ConfigError, match="over the 1,048,576-byte limit"):
        load_settings(path)


@pytest.mark.parametrize(("url", "words"), [
    ("postgresql://u:hunter2@db:notaport/cg", "the port 'notaport' is not a number"),
    ("sqlite//costguard.db", "is not a database URL"),
    ("mysql://u:hunter2@db/cg", "the scheme 'mysql' is not supported"),
    ("postgresql://u:hunter2@/cg", "no host"),
    ("postgresql://u:hunter2@db", "no database name"),
    ("::::", "is not a database URL"),
])
def test_a_malformed_database_url_says_what_is_wrong_in_one_line(url: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_url(url)
    message = str(caught.value)
    assert words in message and "\n" not in message and "hunter2" not in message


def test_accepted_database_urls() -> None:
    assert check_url("postgres://u:p@db:5432/cg").startswith("postgresql+psycopg://")
    assert check_url("postgresql://u@/cg?host=/var/run/postgresql").startswith("postgresql+")
    assert check_url("sqlite:///costguard.db") == "sqlite:///costguard.db"


def test_the_cli_prints_one_line_for_a_bad_database_url(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "costguard"), "report"], capture_output=True,
        text=True,
        cwd=tmp_path, timeout=60,
        env={"COSTGUARD_DATABASE_URL": "postgresql://u:hunter2@db:notaport/cg",
             "PATH": "/usr/bin:/bin"})
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Traceback" not in out and "hunter2" not in out
    assert "database_url: the port 'notaport' is not a number" in out


@pytest.mark.parametrize(("command", "doing"), [
    ("report", "open or migrate"),
    # a command that only reads: it said "the database schema is not up to date" of a
    # server that did not answer, and sent the person to `costguard db upgrade`
    ("status", "open"),
])
def test_an_unreachable_database_is_one_line_naming_where_to_fix_it(
        tmp_path: Path, command: str, doing: str) -> None:
    # a port nothing listens on: psycopg's two-line "connection refused / is the server
    # running" comes out as one line, without the password
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = subprocess.run(
        [str(Path(sys.executable).parent / "costguard"), "--database",
         f"postgresql://u:hunter2@127.0.0.1:{port}/cg", command], capture_output=True,
        text=True, cwd=tmp_path, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: cannot {doing} the database at postgresql")
    assert "accepting TCP/IP connections? Check database_url" in lines[0]
    assert "hunter2" not in result.stderr and "COSTGUARD_DATABASE_URL" in lines[0]


@pytest.mark.parametrize(("argv", "says"), [
    # each was an OverflowError's traceback: a time before the year 1 or after 9999
    (["report", "--since", "3650000d"], "--since: invalid duration '3650000d': longer than "
                                        "100 years (36500d)"),
    (["audit", "--since", "3650000d"], "longer than 100 years"),
    (["audit", "--since", "0001-01-01T00:00+05:00"], "--since '0001-01-01T00:00+05:00' is "
                                                     "outside the dates costguard reads"),
    (["simulate", "--since", "3650000d", "--recommendations"], "longer than 100 years"),
    (["anomaly", "list", "--since", "3650000d"], "longer than 100 years"),
    (["explain", "i-0abc", "--at", "3650000d"], "--at: invalid duration"),
    (["explain", "i-0abc", "--at", "0001-01-01"], "outside the dates"),
    (["recommend", "--window", "3650000d"], "longer than 100 years"),
    (["snooze", "i-0abc", "--for", "3650000d", "--reason", "x", "--no-tag"],
     "longer than 100 years"),
    # 0s was taken as the default step; 1s ran 600,000 cycles a week
    (["simulate", "--policy", "policies", "--step", "0s"], "--step '0s': at least 1m"),
    (["simulate", "--policy", "policies", "--step", "59s"], "--step '59s': at least 1m"),
    # an idle threshold of infinity made a busy GPU idle, and the agent's self-stop acts
    (["agent", "--idle-below", "1e400", "--url", "http://127.0.0.1:9"],
     "--idle-below inf: a percentage from 0 to 100"),
    (["agent", "replay", TRACE, "--below", "nan"], "--below nan: a percentage from 0 to 100"),
    (["agent", "replay", TRACE, "--below", "101"], "--below 101.0: a percentage"),
])
def test_a_time_out_of_range_is_one_line_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], says: str) -> None:
    from typer.testing import CliRunner

    from costguard.cli import app

    monkeypatch.chdir(tmp_path)
    shutil.copytree(Path(__file__).resolve().parents[2] / "policies", tmp_path / "policies")
    for var in ("COSTGUARD_DATABASE_URL", "COSTGUARD_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    result = CliRunner().invoke(app, argv)
    out = " ".join(result.output.split())  # typer's box wraps the snooze message
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert says in out, out
