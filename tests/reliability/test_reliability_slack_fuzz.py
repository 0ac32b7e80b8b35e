"""Fuzzing the Slack interactivity callback: any signed body gets 200 or a 4xx, never a
500 or a traceback, and a rejected payload writes nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from starlette.routing import Route
from starlette.testclient import TestClient

from costguard.alerts.slack import ACTION_PREFIX
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.daemon.http import ServiceState, build_app
from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.routes import extra_routes
from costguard.daemon.settings import DaemonSettings
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow
from tests.daemon.daemon_helpers import START
from tests.reliability import figures

SECRET = "slack-fuzz-secret-7"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str, Database]]:
    db = Database(f"sqlite:///{tmp_path_factory.mktemp('slack') / 'cg.db'}")
    cfg = Settings(database_url=db.url,
                   alerts={"slack": {"signing_secret": SECRET}})
    routes = extra_routes(cfg, DaemonSettings(), db, DaemonMetrics(), ManualClock(START))
    path = next(r.path for r in routes if isinstance(r, Route) and r.path.startswith("/slack"))
    app = build_app(db, ServiceState(poll_interval=timedelta(minutes=1)), DaemonMetrics(),
                    ManualClock(START), extra_routes=routes)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, path, db
    db.dispose()


_SENT: set[tuple[str, bytes]] = set()  # (timestamp, body) already signed and sent


def _post(served: tuple[TestClient, str, Database], body: bytes) -> int:
    client, path, _ = served
    stamp = str(int(time.time()))
    sig = hmac.new(SECRET.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
    answer = client.post(path, content=body, headers={
        "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": "v0=" + sig.hexdigest(),
        "Content-Type": "application/x-www-form-urlencoded"})
    # the same signed request twice (hypothesis repeats examples) is a replay: 401
    figures.count("slack: fuzzed signed requests answered 2xx/4xx, no traceback",
                  answer.status_code < 500 and "Traceback" not in answer.text)
    replay = (stamp, body) in _SENT
    _SENT.add((stamp, body))
    assert answer.status_code in ((401,) if replay else (200, 400)), answer.text
    assert "Traceback" not in answer.text
    assert isinstance(answer.json(), dict)
    return int(answer.status_code)


def _journal(db: Database) -> int:
    with db.session() as s:
        return int(s.execute(select(func.count()).select_from(ActionJournalRow)).scalar() or 0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=12)


@st.composite
def near_valid(draw: Any) -> dict[str, Any]:
    """block_actions payloads whose parts are each sometimes replaced by junk."""
    def maybe(good: Any) -> Any:
        return draw(json_values) if draw(st.integers(0, 4)) == 0 else good
    value = {"a": draw(st.sampled_from(["snooze", "stop-now", "nap"])), "p": "idle-stop",
             "pr": "sim", "i": draw(st.text(min_size=1, max_size=300)),
             "for": draw(st.sampled_from(["1h", "4h", "tomorrow", "-3d", "9999999d", ""]))}
    value = {k: maybe(v) for k, v in value.items()}
    action = {"action_id": maybe(f"{ACTION_PREFIX}snooze"),
              "value": maybe(json.dumps(value) if draw(st.booleans()) else value)}
    return {"type": maybe("block_actions"), "user": maybe({"id": "U1", "username": "ana"}),
            "actions": maybe([maybe(action) for _ in range(draw(st.integers(0, 3)))])}


FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(payload=json_values | near_valid())
def test_any_signed_payload_gets_a_clear_answer(
        served: tuple[TestClient, str, Database], payload: Any) -> None:
    before = _journal(served[2])
    if _post(served, urlencode({"payload": json.dumps(payload)}).encode()) == 400:
        assert _journal(served[2]) == before  # refused whole: nothing journaled


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=300))
def test_any_signed_bytes_get_a_clear_answer(
        served: tuple[TestClient, str, Database], body: bytes) -> None:
    _post(served, body)
