"""The test harness itself: the throwaway PostgreSQL and the db_url/pg_url fixtures."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    inspect,
    select,
    text,
)

from tests.pg import SESSION_DATABASE, PostgresServer, process_alive, reap_orphans
from tests.procs import python_m_interruptible

REPO_ROOT = Path(__file__).resolve().parent.parent


def _proc_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def test_server_listens_on_loopback_as_an_unprivileged_user(pg_server: PostgresServer) -> None:
    engine = create_engine(pg_server.url)
    try:
        with engine.connect() as conn:
            row = conn.execute(text(
                "SELECT current_database(), host(inet_server_addr()), inet_server_port(), "
                "current_setting('fsync')"
            )).one()
    finally:
        engine.dispose()
    assert tuple(row) == (SESSION_DATABASE, "127.0.0.1", pg_server.port, "off")
    pid = pg_server.postmaster_pid()
    assert pid is not None and process_alive(pid)
    assert _proc_uid(pid) != 0
    assert (pg_server.root / f".s.PGSQL.{pg_server.port}").is_socket()


def test_rows_round_trip_through_sqlalchemy(db_url: str) -> None:
    metadata = MetaData()
    readings = Table(
        "readings", metadata,
        Column("id", Integer, primary_key=True),
        Column("instance_id", String(64), nullable=False),
        Column("at", DateTime(timezone=True), nullable=False),
    )
    at = datetime(2026, 11, 23, 12, 30, tzinfo=UTC)
    engine = create_engine(db_url)
    try:
        metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(readings.insert(), [
                {"instance_id": "i-0abc", "at": at}, {"instance_id": "gpu-ü-1", "at": at},
            ])
        with engine.connect() as conn:
            rows = conn.execute(select(readings.c.instance_id).order_by(readings.c.id)).all()
    finally:
        engine.dispose()
    assert [r.instance_id for r in rows] == ["i-0abc", "gpu-ü-1"]
    assert engine.dialect.name == db_url.split(":", 1)[0].split("+", 1)[0]


_databases_seen: list[str] = []


@pytest.mark.parametrize("writer", ["first", "second"])
def test_each_test_starts_with_an_empty_database_of_its_own(pg_url: str, writer: str) -> None:
    engine = create_engine(pg_url)
    try:
        assert inspect(engine).get_table_names() == []
        with engine.begin() as conn:
            database = conn.execute(text("SELECT current_database()")).scalar_one()
            conn.execute(text("CREATE TABLE leftover (who text)"))
            conn.execute(text("INSERT INTO leftover VALUES (:who)"), {"who": writer})
    finally:
        engine.dispose()
    assert database not in _databases_seen
    _databases_seen.append(database)


# -- whole sessions in a subprocess: what is left behind after the session ends --------------

_INNER_INI = """\
[pytest]
markers =
    postgres: x
    slow: x
"""

_INNER_CONFTEST = """\
from tests.conftest import _pg_service, db_url, pg_server, pg_url  # noqa: F401
from tests.conftest import pytest_collection_modifyitems  # noqa: F401
"""

_INNER_TESTS = """\
import json, os, time
from pathlib import Path

def test_records_the_server(pg_server):
    info = {"pid": pg_server.postmaster_pid(), "port": pg_server.port,
            "root": str(pg_server.root)}
    Path(os.environ["PG_INFO"]).write_text(json.dumps(info))
    if os.environ.get("HANG"):
        time.sleep(120)

def test_deliberate_failure(pg_url):
    raise AssertionError("deliberate failure")

def test_both_backends(db_url):
    pass
"""


def _inner_session(tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    (tmp_path / "pytest.ini").write_text(_INNER_INI)
    (tmp_path / "conftest.py").write_text(_INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(_INNER_TESTS))
    full_env = {k: v for k, v in os.environ.items() if k not in {"CI", "PYTEST_ADDOPTS"}}
    # No plugin autoload: importing hypothesis alone costs the inner session 1.5 s.
    full_env.update(PYTHONPATH=str(REPO_ROOT), PG_INFO=str(tmp_path / "info.json"),
                    PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", **env)
    return subprocess.Popen(
        python_m_interruptible("pytest", "-p", "no:cacheprovider", "-rs", "-q", str(tmp_path)),
        cwd=tmp_path, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _assert_server_gone(info: dict[str, object]) -> None:
    pid, port, root = int(str(info["pid"])), int(str(info["port"])), Path(str(info["root"]))
    deadline = time.monotonic() + 10
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(pid), f"postmaster {pid} still running"
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))
    assert not root.exists(), f"{root} left behind"


@pytest.mark.postgres
def test_server_is_stopped_and_deleted_when_the_session_ends_with_a_failure(
    tmp_path: Path,
) -> None:
    proc = _inner_session(tmp_path)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, output
    assert "1 failed, 3 passed" in output, output
    _assert_server_gone(json.loads((tmp_path / "info.json").read_text()))


@pytest.mark.postgres
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_server_is_stopped_and_deleted_when_the_session_is_interrupted(
    tmp_path: Path, signum: signal.Signals
) -> None:
    proc = _inner_session(tmp_path, HANG="1")
    info_file = tmp_path / "info.json"
    deadline = time.monotonic() + 60
    while not info_file.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert info_file.exists(), proc.communicate(timeout=30)[0] if proc.poll() is not None else ""
    time.sleep(0.2)  # the inner test is now asleep inside the session
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=60)
    assert "KeyboardInterrupt" in output, output
    _assert_server_gone(json.loads(info_file.read_text()))


def test_missing_postgres_skips_its_half_by_name_outside_ci(tmp_path: Path) -> None:
    proc = _inner_session(tmp_path, COSTGUARD_PG_BINDIR=str(tmp_path / "nowhere"))
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert "1 passed, 3 skipped" in output, output
    assert "PostgreSQL unavailable: COSTGUARD_PG_BINDIR=" in output, output


def test_missing_postgres_fails_the_run_in_ci(tmp_path: Path) -> None:
    proc = _inner_session(tmp_path, COSTGUARD_PG_BINDIR=str(tmp_path / "nowhere"), CI="true")
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, output
    assert "1 passed, 3 errors" in output, output
    assert "CI=true: PostgreSQL tests must run" in output, output


@pytest.mark.postgres
def test_a_server_orphaned_by_a_killed_run_is_reaped_by_the_next(tmp_path: Path) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""\
            import json, os, sys
            from tests.pg import start_throwaway_postgres
            server = start_throwaway_postgres()
            print(json.dumps({"pid": server.postmaster_pid(), "port": server.port,
                              "root": str(server.root)}), flush=True)
            os.kill(os.getpid(), 9)
        """)],
        cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    info = json.loads(killed.stdout.strip().splitlines()[-1])
    assert process_alive(int(info["pid"])), "the orphan should outlive its killed owner"
    reap_orphans(Path(info["root"]).parent)
    _assert_server_gone(info)
