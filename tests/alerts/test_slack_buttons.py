"""Slack button clicks over real HTTP: signature checks, snoozes, stop-now, the audit trail."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from sqlmodel import select
from starlette.applications import Starlette

from costguard.alerts.content import view_of
from costguard.alerts.interactive import (
    SLACK_RESPONSE_URLS,
    journal_actions,
    response_url_taken,
    slack_routes,
)
from costguard.alerts.slack import slack_message
from costguard.clock import ManualClock
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow, PolicyStateRow
from tests.alerts.fakes import LOOPBACK_RESPONSES, RESPONSE_PATH, SlackFake
from tests.alerts.helpers import T0, idle_warning, seed_warned_instance, slack_signed
from tests.fakes.loopback import free_port, serve

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
    app = Starlette(routes=slack_routes(SECRET, journal_actions(db, clock, timedelta(hours=24)),
                                        response_urls=LOOPBACK_RESPONSES))
    with serve(app, free_port()) as base:
        yield f"{base}/slack/actions"


def _click(value: dict[str, str], user: str = "U0ANA0001", **extra: object) -> bytes:
    payload = {"type": "block_actions", "user": {"id": user, "username": "ana"},
               "actions": [{"action_id": "costguard_snooze_x", "value": json.dumps(value)}],
               **extra}
    return urlencode({"payload": json.dumps(payload)}).encode()


def _signed(body: bytes, *, secret: str = SECRET, at: int | None = None) -> dict[str, str]:
    return slack_signed(body, secret, at=at)


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


# -- the original message shows who did what --------------------------------------------


@pytest.fixture
def slack() -> Iterator[tuple[SlackFake, str]]:
    fake = SlackFake()
    with serve(fake.app(), free_port()) as base:
        yield fake, base


def _original(db: Database) -> dict[str, object]:
    idle_warning(db, recipients=("slack:#finops",))
    with db.session() as s:
        alert = s.exec(select(AlertRow)).one()
        view = view_of(alert, timedelta(hours=24))
    return {"type": "message", "ts": "1772460005.000001", **slack_message(view, "k")}


def _updates(fake: SlackFake, n: int) -> list[dict[str, Any]]:
    """The response_url posts, once `n` have arrived (they follow the answer)."""
    for _ in range(500):
        if len(fake.response_posts) >= n:
            break
        time.sleep(0.01)
    return fake.response_posts


def _buttons(message: dict[str, Any]) -> list[str]:
    return [e["text"]["text"] for b in message["blocks"] if b["type"] == "actions"
            for e in b["elements"]]


def _outcome(message: dict[str, Any]) -> list[str]:
    return [e["text"] for b in message["blocks"] if b.get("block_id") == "costguard_outcome"
            for e in b["elements"]]


def test_a_snooze_click_updates_the_message_to_say_who_snoozed_until_when(
        db: Database, endpoint: str, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    original = _original(db)
    body = _click(SNOOZE_4H, response_url=base + RESPONSE_PATH, message=original)
    assert httpx.post(endpoint, content=body, headers=_signed(body)).status_code == 200
    [update] = _updates(fake, 1)
    assert update["replace_original"] is True and update["text"] == original["text"]
    assert _outcome(update) == [
        ":zzz: <@U0ANA0001>: i-0abc000000000000 snoozed until 2026-03-02 18:00 UTC"]
    # the facts stay, and so do the buttons: someone may still stop it or snooze again
    assert "$98.32/h" in json.dumps(update["blocks"])
    assert _buttons(update) == _buttons(original)
    # a second click on the updated message adds its line under the first
    stop = _click({"a": "stop-now", "p": "idle-gpu", "pr": "sim", "i": "i-0abc000000000000"},
                  user="U0BO000002", response_url=base + RESPONSE_PATH, message=update)
    assert httpx.post(endpoint, content=stop, headers=_signed(stop)).status_code == 200
    second = _updates(fake, 2)[1]
    lines = _outcome(second)
    assert len(lines) == 2 and lines[0] == _outcome(update)[0]
    assert lines[1].startswith(":octagonal_sign: <@U0BO000002>: asked to stop "
                               "i-0abc000000000000 now")
    assert _buttons(second) == []  # it will be stopped: nothing left to choose


def test_a_click_that_changes_nothing_says_so_and_keeps_the_buttons(
        db: Database, endpoint: str, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    original = _original(db)
    with db.session() as s:
        st = s.get(PolicyStateRow, ("idle-gpu", "sim", "i-0abc000000000000"))
        assert st is not None
        st.state = "cleared"  # it got busy again before the click
        s.add(st)
    body = _click({"a": "stop-now", "p": "idle-gpu", "pr": "sim", "i": "i-0abc000000000000"},
                  response_url=base + RESPONSE_PATH, message=original)
    assert httpx.post(endpoint, content=body, headers=_signed(body)).status_code == 200
    [update] = _updates(fake, 1)
    assert "no longer pending a stop" in _outcome(update)[0]
    assert _buttons(update) == _buttons(original)


def test_forged_click_updates_no_message(db: Database, endpoint: str,
                                        slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    body = _click(SNOOZE_4H, response_url=base + RESPONSE_PATH, message=_original(db))
    assert httpx.post(endpoint, content=body,
                      headers=_signed(body, secret="nope")).status_code == 401
    # a valid click afterwards is the first and only update
    good = _click(SNOOZE_4H, response_url=base + RESPONSE_PATH, message=_original_again())
    assert httpx.post(endpoint, content=good, headers=_signed(good)).status_code == 200
    assert len(_updates(fake, 1)) == 1
    assert "snoozed until" in _outcome(fake.response_posts[0])[0]


def _original_again() -> dict[str, object]:
    return {"type": "message", "text": "t", "blocks": [{"type": "section", "text": {
        "type": "mrkdwn", "text": "an earlier costguard message"}}]}


@pytest.mark.parametrize("headers", [
    {},
    {"X-Slack-Request-Timestamp": "yesterday", "X-Slack-Signature": "v0=" + "a" * 64},
    {"X-Slack-Request-Timestamp": "1" * 40, "X-Slack-Signature": "v0=" + "a" * 64},
    {"X-Slack-Request-Timestamp": "1700000000", "X-Slack-Signature": "v1=zz"},
    {"X-Slack-Request-Timestamp": "1700000000",
     "X-Slack-Signature": b"v0=" + "\u00e9".encode("latin-1") * 64},  # type: ignore[dict-item]
    {"X-Slack-Request-Timestamp": "-5", "X-Slack-Signature": ""},
])
def test_junk_signature_headers_are_a_401_never_a_5xx(db: Database, endpoint: str,
                                                       headers: dict[str, str]) -> None:
    resp = httpx.post(endpoint, content=_click(SNOOZE_4H), headers=headers)
    assert resp.status_code == 401 and "signature" in resp.json()["error"]
    assert _journal(db) == []


def test_a_replayed_signed_click_is_refused_and_applied_once(db: Database,
                                                             endpoint: str) -> None:
    body = _click(SNOOZE_4H)
    headers = _signed(body)
    assert httpx.post(endpoint, content=body, headers=headers).status_code == 200
    again = httpx.post(endpoint, content=body, headers=headers)
    assert again.status_code == 401 and "replayed" in again.json()["error"]
    assert len([j for j in _journal(db) if j.action == "snooze"]) == 1


def test_an_oversized_body_is_refused_while_it_streams(db: Database) -> None:
    """The route stops reading past its limit: what the app takes in of a 32 MiB chunked
    upload stays near 256 KiB (it used to read all of it before checking the signature)."""
    consumed = {"bytes": 0}
    inner = Starlette(routes=slack_routes(SECRET, journal_actions(db, ManualClock(T0),
                                                                  timedelta(hours=24))))

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        async def counted() -> Any:
            message = await receive()
            consumed["bytes"] += len(message.get("body", b""))
            return message
        await inner(scope, counted, send)

    def chunks() -> Iterator[bytes]:  # chunked: no Content-Length to refuse up front
        for _ in range(512):
            yield b"x" * 65536

    body = _click(SNOOZE_4H)
    with serve(counting, free_port()) as base:
        url = f"{base}/slack/actions"
        try:
            resp = httpx.post(url, content=chunks(), headers=_signed(body), timeout=60)
            assert resp.status_code == 413
        except httpx.HTTPError:
            pass  # the server may close the connection mid-upload: also a refusal
        big = b"payload=" + b"x" * (300 * 1024)
        assert httpx.post(url, content=big, headers=_signed(big)).status_code == 413
    assert consumed["bytes"] < 2**20, consumed
    assert _journal(db) == []


def test_a_click_whose_response_url_is_not_slacks_updates_nothing_there(
        db: Database, slack: tuple[SlackFake, str], caplog: pytest.LogCaptureFixture) -> None:
    """A signed click's `response_url` is where the daemon posts the updated message: only
    Slack's hooks are taken (by default), so a payload signed with a leaked signing secret
    cannot point the daemon's post at another host. The click itself still counts."""
    fake, base = slack
    app = Starlette(routes=slack_routes(SECRET, journal_actions(db, ManualClock(T0),
                                                                timedelta(hours=24))))
    body = _click(SNOOZE_4H, response_url=base + RESPONSE_PATH, message=_original(db))
    with serve(app, free_port()) as daemon, caplog.at_level(logging.WARNING):
        assert httpx.post(f"{daemon}/slack/actions", content=body,
                          headers=_signed(body)).status_code == 200
        time.sleep(0.3)  # an update would follow the answer
    assert fake.response_posts == [] and "response_url" not in fake.calls
    assert [j.action for j in _journal(db)] == ["snooze"]
    assert "is not Slack's (127.0.0.1)" in caplog.text and "responseSECRET" not in caplog.text


@pytest.mark.parametrize(("url", "taken"), [
    ("https://hooks.slack.com/actions/T0/1/abc", True),
    ("https://hooks.slack-gov.com/actions/T0/1/abc", True),
    ("https://hooks.slack.com.evil.example/actions/T0/1/abc", False),
    ("https://hooks.slack.com@evil.example/actions", False),
    ("http://hooks.slack.com/actions/T0/1/abc", False),
    ("https://evil.example/https://hooks.slack.com/", False),
])
def test_only_slacks_hooks_are_response_urls(url: str, taken: bool) -> None:
    assert response_url_taken(url, SLACK_RESPONSE_URLS) is taken
