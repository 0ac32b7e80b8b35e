"""The daemon's HTTP surface over real loopback HTTP: probes, metrics, agent ingest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from costguard.clock import ManualClock
from costguard.daemon.http import HttpServer, ServiceState, build_app, readiness
from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.routes import extra_routes
from costguard.daemon.scheduler import Daemon
from costguard.daemon.settings import DaemonSettings
from costguard.daemon.sink import StoreSink
from costguard.model import GpuMinute, TelemetrySource
from costguard.store.db import Database
from costguard.store.tables import GpuReadingRow
from tests.daemon.daemon_helpers import (
    START,
    build_engine,
    captured_logs,
    quiet_daemon,
    scripted_cloud,
)

TOKEN = "agent-token-5f1c9e0d7a"


@pytest.fixture
def served(db: Database) -> Iterator[tuple[str, Daemon, ManualClock]]:
    clock = ManualClock(START)
    engine = build_engine(db, scripted_cloud(clock), clock, http={"ingest_token": TOKEN})
    daemon = Daemon(engine, engine.settings, DaemonSettings(leader_election="off"), http_port=0)
    daemon.state.started_at = clock.now()
    app = build_app(db, daemon.state, daemon.metrics, clock,
                    extra_routes=extra_routes(engine.settings, daemon.cfg, db, daemon.metrics,
                                              clock))
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", daemon, clock
    finally:
        server.stop()


def minute(i: int, instance: str = "i-agent", **kw: object) -> dict[str, object]:
    m = GpuMinute(provider="sim", instance_id=instance, gpu_index=0,
                  minute=START + timedelta(minutes=i), source=TelemetrySource.AGENT,
                  util_mean=1.0, sm_mean=0.5, **kw)  # type: ignore[arg-type]
    return m.model_dump(mode="json")


def rows(db: Database) -> int:
    with db.session() as s:
        return int(s.execute(select(func.count()).select_from(GpuReadingRow)).scalar() or 0)


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_probes_answer_and_readiness_follows_the_cycles(
        served: tuple[str, Daemon, ManualClock]) -> None:
    base, daemon, clock = served
    assert httpx.get(f"{base}/healthz").json()["status"] == "ok"
    ready = httpx.get(f"{base}/readyz")
    assert ready.status_code == 200 and ready.json()["waiting_for_first_cycle"] is True
    clock.advance(timedelta(minutes=5))  # 5 poll intervals and still no cycle
    assert httpx.get(f"{base}/readyz").status_code == 503
    assert daemon.cycle_job() is not None
    assert httpx.get(f"{base}/readyz").json()["status"] == "ready"
    clock.advance(timedelta(minutes=3, seconds=1))
    stale = httpx.get(f"{base}/readyz")
    assert stale.status_code == 503 and "no successful cycle" in stale.json()["error"]


def test_readiness_fails_when_the_database_is_unreachable(tmp_path: Path) -> None:
    gone = Database(f"sqlite:///{tmp_path / 'x.db'}")
    gone.engine.dispose()
    (tmp_path / "x.db").unlink()
    (tmp_path / "x.db").mkdir()  # a directory where the file was: every connect fails
    ok, body = readiness(gone, ServiceState(poll_interval=timedelta(minutes=1)),
                         ManualClock(START))
    assert not ok and body["database"] == "unreachable"


def test_metrics_report_cycle_stages_fleet_and_agent_reports(
        served: tuple[str, Daemon, ManualClock], db: Database) -> None:
    base, daemon, clock = served
    for _ in range(3):
        daemon.cycle_job()
        clock.advance(timedelta(minutes=1))
    httpx.post(f"{base}/v1/telemetry", headers=auth(), json={"minutes": [minute(0)]})
    text = httpx.get(f"{base}/metrics").text
    for stage in ("collect", "telemetry", "accrue", "evaluate", "act", "alert"):
        assert f'costguard_cycle_stage_seconds_count{{stage="{stage}"}} 3.0' in text
    assert 'costguard_cycles_total{status="ok"} 3.0' in text
    # three idle instances were warned, then stopped when their 2-minute grace ran out
    assert 'costguard_instances{provider="sim",state="running"} 2.0' in text
    assert 'costguard_instances{provider="sim",state="stopped"} 3.0' in text
    assert 'costguard_actions_total{action="stopped",policy="idle-stop"} 3.0' in text
    assert 'costguard_agent_minutes_total{outcome="stored"} 1.0' in text
    assert 'costguard_alerts{status="pending"}' in text
    assert "costguard_idle_usd_per_hour" in text
    assert 'costguard_findings{policy="idle-stop"}' in text


def test_ingest_writes_a_batch_once_and_ignores_repeats(
        served: tuple[str, Daemon, ManualClock], db: Database) -> None:
    base, _, _ = served
    batch = {"minutes": [minute(i) for i in range(5)]}
    first = httpx.post(f"{base}/v1/telemetry", headers=auth(), json=batch)
    assert first.json() == {"received": 5, "written": 5, "duplicates": 0, "hooks": []}
    again = httpx.post(f"{base}/v1/telemetry", headers=auth(),
                       json={"minutes": [minute(4), minute(5)]})
    assert again.json() == {"received": 2, "written": 1, "duplicates": 1, "hooks": []}
    assert rows(db) == 6


def test_first_write_of_a_minute_wins(served: tuple[str, Daemon, ManualClock],
                                      db: Database) -> None:
    base, _, _ = served
    httpx.post(f"{base}/v1/telemetry", headers=auth(), json=[minute(0)])
    changed = minute(0)
    changed["util_mean"] = 99.0
    httpx.post(f"{base}/v1/telemetry", headers=auth(), json=[changed])
    with db.session() as s:
        assert s.execute(select(GpuReadingRow.util_mean)).scalar() == 1.0


def test_a_batch_with_one_bad_item_writes_nothing(
        served: tuple[str, Daemon, ManualClock], db: Database) -> None:
    base, _, _ = served
    bad = minute(3)
    bad["util_mean"] = 250  # over 100 %
    answer = httpx.post(f"{base}/v1/telemetry", headers=auth(),
                        json=[minute(1), minute(2), bad])
    assert answer.status_code == 422 and answer.json()["index"] == 2
    assert rows(db) == 0


def test_ingest_refuses_a_wrong_token_and_never_logs_it(
        served: tuple[str, Daemon, ManualClock], db: Database) -> None:
    base, _, _ = served
    with captured_logs("json", secrets=(TOKEN,)) as logs:
        wrong = httpx.post(f"{base}/v1/telemetry", headers=auth("not-the-token"),
                           json=[minute(0)])
        import logging

        logging.getLogger("costguard.test").warning("header was Bearer %s", TOKEN)
    assert wrong.status_code == 401 and rows(db) == 0
    text = logs.getvalue()
    assert TOKEN not in text and "Bearer ***" in text
    for line in text.splitlines():
        json.loads(line)


def test_unknown_routes_and_methods_get_json_4xx(
        served: tuple[str, Daemon, ManualClock]) -> None:
    base, _, _ = served
    assert httpx.get(f"{base}/nope").status_code == 404
    assert httpx.post(f"{base}/healthz").status_code == 405
    assert httpx.get(f"{base}/v1/telemetry").json()["error"].startswith("GET not allowed")


def test_a_store_failure_is_a_503_not_a_500(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    metrics = DaemonMetrics()
    sink = StoreSink(db, metrics)
    GpuReadingRow.__table__.drop(db.engine)  # type: ignore[attr-defined]
    from starlette.testclient import TestClient

    from costguard.telemetry.ingest import telemetry_app

    with TestClient(telemetry_app(token=TOKEN, sink=sink, clock=lambda: START)) as client:
        answer = client.post("/v1/telemetry", headers=auth(), json=[minute(0)])
    assert answer.status_code == 503


def test_the_http_server_binds_loopback_by_default(db: Database) -> None:
    clock = ManualClock(START)
    engine = build_engine(db, scripted_cloud(clock), clock)
    assert engine.settings.http.host == "127.0.0.1"
    daemon = Daemon(engine, engine.settings, quiet_daemon())
    assert daemon.cfg.http_enabled is False
