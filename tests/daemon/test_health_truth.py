"""Health that tells the truth: with the cloud unreachable, cycles still finish "ok", but
/readyz and `costguard status` say what costguard governs: degraded while a scope stays
unreadable, not ready when every scope is (0 instances governed)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard import cli_common
from costguard.cli import app
from costguard.clock import ManualClock
from costguard.daemon.http import ServiceState, readiness
from costguard.model import Gap, GpuMinute, Instance, Inventory
from costguard.store.db import Database
from tests.daemon.daemon_helpers import START, build_engine, scripted_cloud


class Unreachable:
    """A cloud whose every scope (or one of them) cannot be read."""

    name = "sim"

    def __init__(self, inner: object, *, all_scopes: bool) -> None:
        self.inner = inner
        self.all_scopes = all_scopes

    def list_instances(self) -> Inventory:
        gap = Gap(provider="sim", scope="111111111111/us-east-1", error="connect timeout")
        if self.all_scopes:
            return Inventory(gaps=[gap])
        listed: Inventory = self.inner.list_instances()  # type: ignore[attr-defined]
        return Inventory(instances=listed.instances, gaps=[gap])

    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        return []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def _run(tmp_path: Path, *, all_scopes: bool, cycles: int) -> tuple[Database, ManualClock]:
    clock = ManualClock(START)
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    cloud = Unreachable(scripted_cloud(clock), all_scopes=all_scopes)
    engine = build_engine(db, cloud, clock, poll=timedelta(minutes=5))  # type: ignore[arg-type]
    for _ in range(cycles):
        engine.run_cycle()
        clock.advance(engine.settings.poll_interval)
    return db, clock


def _state(clock: ManualClock) -> ServiceState:
    return ServiceState(poll_interval=timedelta(minutes=5), started_at=START)


@pytest.mark.parametrize("all_scopes", [True, False])
def test_a_scope_unreadable_for_cycles_is_degraded_and_nothing_governed_is_not_ready(
        tmp_path: Path, all_scopes: bool) -> None:
    db, clock = _run(tmp_path, all_scopes=all_scopes, cycles=2)
    ready, body = readiness(db, _state(clock), clock)
    assert ready and body["health"] == "ok"  # a passing outage is not degraded yet
    db.dispose()
    (tmp_path / "long").mkdir()
    db, clock = _run(tmp_path / "long", all_scopes=all_scopes, cycles=6)
    ready, body = readiness(db, _state(clock), clock)
    assert body["health"] == "degraded"
    assert any("111111111111/us-east-1" in u for u in body["unreadable"])  # type: ignore[union-attr]
    assert ready is not all_scopes  # governing nothing at all: not ready
    if all_scopes:
        assert "governing 0 instances" in str(body["error"])
    db.dispose()


def test_costguard_status_says_degraded_and_exits_1(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "long").mkdir()
    db, clock = _run(tmp_path / "long", all_scopes=True, cycles=6)
    db.dispose()
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'long' / 'cg.db'}")
    monkeypatch.setenv("COSTGUARD_POLL_INTERVAL", "5m")
    monkeypatch.setattr(cli_common, "CLOCK", clock)
    result = CliRunner().invoke(app, ["status", "--format", "json"])
    info = json.loads(result.output)
    assert result.exit_code == 1
    assert info["cycling"] is True and info["healthy"] is False
    assert info["governed_instances"] == 0 and info["degraded"]


def test_a_port_in_use_is_one_line_not_a_traceback(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from costguard.starter import write_starter

    write_starter(tmp_path)
    monkeypatch.chdir(tmp_path)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    monkeypatch.setenv("COSTGUARD_HTTP__PORT", str(port))
    monkeypatch.setenv("COSTGUARD_AGENT_TOKEN", "t0ken-abc")
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'cg.db'}")
    try:
        result = CliRunner().invoke(app, ["run"])
    finally:
        taken.close()
    assert result.exit_code == 2
    assert f"could not listen on 127.0.0.1:{port}" in result.output
    assert "Traceback" not in result.output


def test_identity_certificates_that_cannot_serve_stop_the_start_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # before, a folder that was not there was read as an empty one: the daemon ran, and
    # every AWS agent's proof was refused with nothing said at start
    from costguard.starter import write_starter

    write_starter(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_AGENT_TOKEN", "t0ken-abc")
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'cg.db'}")
    monkeypatch.setenv("COSTGUARD_HTTP__IDENTITY__AWS_CERTS_DIR", str(tmp_path / "certs"))
    result = CliRunner().invoke(app, ["run"])
    assert result.exit_code == 2, result.output
    assert "http.identity.aws_certs_dir: " in result.output
    assert "certs is not a folder" in result.output
    assert "Traceback" not in result.output
