"""Suite-wide fixtures: databases on SQLite and on a throwaway PostgreSQL.

- `db_url` (per test): a SQLAlchemy URL, parametrized ["sqlite", "postgresql"], so a test
  that takes it runs once per backend. sqlite is a fresh file in tmp_path; postgresql is a
  fresh, empty database on the session's server.
- `pg_url` (per test): the PostgreSQL half alone, for PostgreSQL-only behaviour (leader
  election with advisory locks, concurrent writers).
- `pg_server` (session): the `tests.pg.PostgresServer` itself; `.url` is the session database
  `costguard_test`, `.create_database()` / `.drop_database()` make more. Under pytest-xdist
  (`make test` runs 2 workers) each worker has a server of its own.

The server starts once, on first use, and is stopped and deleted at the end of the session,
also on failure, Ctrl-C or SIGTERM. Where PostgreSQL cannot start, its tests are skipped with
"PostgreSQL unavailable: <why>", except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from costguard.store.db import Database

# `tests.*` (this harness, tests/fakes) must import however pytest was started.
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from tests.pg import (  # noqa: E402
    ATTACH_ENV,
    PostgresServer,
    PostgresUnavailable,
    attach_postgres,
    start_throwaway_postgres,
)

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # `-m "not postgres"` then deselects every test that would start the server.
    for item in items:
        if "pg_url" in getattr(item, "fixturenames", ()) or "pg_server" in getattr(
            item, "fixturenames", ()
        ):
            item.add_marker(pytest.mark.postgres)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Under pytest-xdist (`make test`), the long fleet-scale tests go first (stable sort:
        # same order on every worker), so they are not the tail one worker runs alone.
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def _pg_service() -> Iterator[PostgresServer | PostgresUnavailable]:
    try:
        address = os.environ.get(ATTACH_ENV)
        server = attach_postgres(address) if address else start_throwaway_postgres()
    except PostgresUnavailable as exc:
        yield exc
        return
    previous = signal.getsignal(signal.SIGTERM)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        # A CI timeout sends SIGTERM: turn it into Ctrl-C so pytest runs the teardown below.
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield server
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop()


@pytest.fixture(scope="session")
def pg_server(_pg_service: PostgresServer | PostgresUnavailable) -> PostgresServer:
    if isinstance(_pg_service, PostgresUnavailable):
        reason = f"PostgreSQL unavailable: {_pg_service}"
        if in_ci():
            pytest.fail(f"{reason} (CI=true: PostgreSQL tests must run, not skip)",
                        pytrace=False)
        pytest.skip(reason)
    return _pg_service


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> Iterator[str]:
    name = pg_server.create_database()
    try:
        yield pg_server.url_for(name)
    finally:
        pg_server.drop_database(name)


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'costguard.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A migrated store on each backend (`db_url`: SQLite and PostgreSQL), disposed after."""
    from costguard.store.db import Database

    database = Database(db_url)
    yield database
    database.dispose()


# -- reliability figures (tests/reliability/figures.py): printed at the end of every run --
def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.reliability import figures

    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand them to the controller
        workeroutput["costguard_figures"] = figures.dump()


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent when xdist is not loaded
def pytest_testnodedown(node: object, error: object) -> None:
    from tests.reliability import figures

    text = getattr(node, "workeroutput", {}).get("costguard_figures")
    if text:
        figures.merge(text)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.reliability import figures

    found = figures.lines()
    if found:
        terminalreporter.section("reliability figures")
        for line in found:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _no_database_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """`costguard --database` is kept for one invocation in `cli_common.DATABASE`; a test
    that invokes a sub-command's Typer app directly must not inherit an earlier test's."""
    from costguard import cli_common

    monkeypatch.setattr(cli_common, "DATABASE", None)
