"""Routes contributed to the daemon's app: agent ingest and the Slack interactivity hook."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
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


def test_slack_routes_are_mounted_when_a_module_provides_them_and_a_secret_is_set(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def slack_routes(secret: str, on_action: Callable[..., Any] | None = None
                     ) -> list[BaseRoute]:
        seen["secret"] = secret

        async def actions(request: Request) -> JSONResponse:
            return JSONResponse({"ok": True})
        return [Route("/slack/actions", actions, methods=["POST"])]

    monkeypatch.setattr(routes, "find_slack_routes", lambda: (slack_routes, object()))
    cfg = DaemonSettings(slack_signing_secret="slack-secret-123")  # type: ignore[arg-type]
    mounted = routes.slack_interactivity_routes(Settings(database_url=db.url), cfg, db)
    app = build_app(db, ServiceState(poll_interval=START - START), DaemonMetrics(),
                    ManualClock(START), extra_routes=mounted)
    with TestClient(app) as client:
        assert client.post("/slack/actions").json() == {"ok": True}
    assert seen["secret"] == "slack-secret-123"


def test_without_a_signing_secret_slack_routes_stay_unmounted(db: Database) -> None:
    assert routes.slack_interactivity_routes(Settings(database_url=db.url), DaemonSettings(),
                                             db) == []
