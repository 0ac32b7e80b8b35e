"""Slack button clicks over real HTTP: signature checks, snoozes, stop-now, the audit trail."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import urlencode

import httpx
import pytest
from sqlmodel import select
from starlette.applications import Starlette

from costguard.alerts.interactive import journal_actions, slack_routes
from costguard.clock import ManualClock
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, PolicyStateRow
from tests.alerts.fakes import free_port, serve
from tests.alerts.helpers import T0, seed_warned_instance

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    seed_warned_instance(database)
    yield database
    database.dispose()


@pytest.fixture
def endpoint(db: Database) -> Iterator[str]:
    clock = ManualClock(T0)
    app = Starlette(routes=slack_routes(SECRET, journal_actions(db, clock, timedelta(hours=24))))
    with serve(app, free_port()) as base:
        yield f"{base}/slack/actions"


def _click(value: dict[str, str], user: str = "U0ANA0001") -> bytes:
    payload = {"type": "block_actions", "user": {"id": user, "username": "ana"},
               "actions": [{"action_id": "costguard_snooze_x", "value": json.dumps(value)}]}
    return urlencode({"payload": json.dumps(payload)}).encode()


def _signed(body: bytes, *, secret: str = SECRET, at: int | None = None) -> dict[str, str]:
    ts = str(at if at is not None else int(time.time()))
    sig = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={sig}",
            "Content-Type": "application/x-www-form-urlencoded"}


def _journal(db: Database) -> list[ActionJournalRow]:
    with db.session() as s:
        return list(s.exec(select(ActionJournalRow)))


def _state(db: Database) -> PolicyStateRow:
    with db.session() as s:
        st = s.get(PolicyStateRow, ("idle-gpu", "sim", "i-0abc000000000000"))
        assert st is not None
        return st


SNOOZE_4H = {"a": "snooze", "p": "idle-gpu", "pr": "sim", "i": "i-0abc000000000000", "for": "4h"}


def test_signed_snooze_click_sets_snooze_and_records_the_slack_user(
        db: Database, endpoint: str) -> None:
    body = _click(SNOOZE_4H)
    resp = httpx.post(endpoint, content=body, headers=_signed(body))
    assert resp.status_code == 200
    assert "snoozed until 2026-03-02 18:00 UTC" in resp.json()["text"]
    assert _state(db).snooze_until == T0 + timedelta(hours=4)
    [entry] = _journal(db)
    assert (entry.action, entry.status) == ("snooze", "requested")
    assert "slack user ana (U0ANA0001)" in entry.detail


def test_snooze_until_tomorrow_is_capped_by_max_snooze(db: Database) -> None:
    clock = ManualClock(T0)
    app = Starlette(routes=slack_routes(SECRET, journal_actions(db, clock, timedelta(hours=6))))
    with serve(app, free_port()) as base:
        body = _click({**SNOOZE_4H, "for": "tomorrow"})
        assert httpx.post(f"{base}/slack/actions", content=body,
                          headers=_signed(body)).status_code == 200
    assert _state(db).snooze_until == T0 + timedelta(hours=6)
    assert "capped at 6h" in _journal(db)[0].detail


def test_stop_now_brings_the_deadline_forward_and_is_journaled(
        db: Database, endpoint: str) -> None:
    body = _click({"a": "stop-now", "p": "idle-gpu", "pr": "sim", "i": "i-0abc000000000000"})
    resp = httpx.post(endpoint, content=body, headers=_signed(body))
    assert resp.status_code == 200 and "next cycle" in resp.json()["text"]
    assert _state(db).deadline == T0
    [entry] = _journal(db)
    assert (entry.action, entry.status) == ("stop-now", "requested")
    assert "U0ANA0001" in entry.detail


@pytest.mark.parametrize("headers", [
    pytest.param(lambda b: _signed(b, secret="not-the-secret"), id="forged"),
    pytest.param(lambda b: _signed(b, at=int(time.time()) - 600), id="stale"),
    pytest.param(lambda b: {"Content-Type": "application/x-www-form-urlencoded"},
                 id="unsigned"),
])
def test_forged_stale_or_unsigned_clicks_get_401_and_change_nothing(
        db: Database, endpoint: str, headers: object) -> None:
    body = _click(SNOOZE_4H)
    resp = httpx.post(endpoint, content=body, headers=headers(body))  # type: ignore[operator]
    assert resp.status_code == 401
    assert _journal(db) == []
    assert _state(db).snooze_until is None


def test_signed_body_that_was_tampered_with_is_refused(db: Database, endpoint: str) -> None:
    headers = _signed(_click(SNOOZE_4H))
    tampered = _click({**SNOOZE_4H, "for": "24h"})
    assert httpx.post(endpoint, content=tampered, headers=headers).status_code == 401
    assert _journal(db) == []


def test_click_on_an_unknown_instance_says_so(db: Database, endpoint: str) -> None:
    body = _click({**SNOOZE_4H, "i": "i-0nothere"})
    resp = httpx.post(endpoint, content=body, headers=_signed(body))
    assert resp.status_code == 200 and "no instance" in resp.json()["text"]
    assert _journal(db) == []


def test_malformed_payload_is_a_400(db: Database, endpoint: str) -> None:
    body = urlencode({"payload": json.dumps({"type": "block_actions", "user": {"id": "U1"},
                                             "actions": [{"action_id": "costguard_x",
                                                          "value": "{\"a\": \"rm\"}"}]})})
    resp = httpx.post(endpoint, content=body.encode(), headers=_signed(body.encode()))
    assert resp.status_code == 400
    assert _journal(db) == []
