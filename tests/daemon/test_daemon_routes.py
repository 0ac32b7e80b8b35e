"""Routes contributed to the daemon's app: agent ingest and the Slack interactivity hook."""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import timedelta
from pathlib import Path

import pytest
from starlette.routing import BaseRoute, Route
from starlette.testclient import TestClient

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.daemon import routes
from costguard.daemon.http import ServiceState, build_app
from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.settings import DaemonSettings
from costguard.store.db import Database
from tests.daemon.daemon_helpers import START


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(f"sqlite:///{tmp_path / 'cg.db'}")


def _paths(found: list[BaseRoute]) -> list[str]:
    return [r.path for r in found if isinstance(r, Route)]


def test_no_token_means_no_ingest_route(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COSTGUARD_AGENT_TOKEN", raising=False)
    found = routes.extra_routes(Settings(database_url=db.url), DaemonSettings(), db,
                                DaemonMetrics())
    assert "/v1/telemetry" not in _paths(found)


def test_the_token_may_come_from_the_agent_variable(db: Database,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTGUARD_AGENT_TOKEN", "tok-from-env-1")
    found = routes.extra_routes(Settings(database_url=db.url), DaemonSettings(), db,
                                DaemonMetrics())
    assert "/v1/telemetry" in _paths(found)


def _signed(secret: str, body: bytes, ts: int | None = None) -> dict[str, str]:
    stamp = str(ts if ts is not None else int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": "v0=" + digest.hexdigest(),
            "Content-Type": "application/x-www-form-urlencoded"}


def test_slack_interactivity_is_mounted_and_verifies_signatures(db: Database) -> None:
    secret = "slack-signing-secret-42"
    settings = Settings(database_url=db.url,
                        alerts={"slack": {"signing_secret": secret}})  # type: ignore[arg-type]
    mounted = routes.extra_routes(settings, DaemonSettings(), db, DaemonMetrics(),
                                  ManualClock(START))
    paths = _paths(mounted)
    assert any(p.startswith("/slack") for p in paths), paths
    app = build_app(db, ServiceState(poll_interval=timedelta(minutes=1)), DaemonMetrics(),
                    ManualClock(START), extra_routes=mounted)
    path = next(p for p in paths if p.startswith("/slack"))
    body = b"payload=not-json"
    with TestClient(app) as client:
        forged = client.post(path, content=body, headers=_signed("wrong-secret", body))
        assert forged.status_code == 401
        signed = client.post(path, content=body, headers=_signed(secret, body))
        assert signed.status_code == 400 and "bad payload" in signed.json()["error"]


