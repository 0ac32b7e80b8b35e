"""A Slack click, then the next engine cycle: "stop now" stops, "snooze" holds, busy wins.

The engine runs on the small in-test cloud of tests/actions (an idle instance whose stop is
a recorded call); clicks go over real HTTP to the signed interactivity endpoint.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from urllib.parse import urlencode

import httpx
import pytest
from starlette.applications import Starlette

from costguard.alerts.interactive import journal_actions, slack_routes
from costguard.clock import ManualClock
from costguard.engine import Engine
from tests.actions.cloud import T0, FakeCloud, journal, make_engine, state_of
from tests.alerts.fakes import free_port, serve

Click = Callable[..., str]
SECRET = "stop-now-signing-secret-0001"
POLICY = """\
policies:
  - name: idle
    mode: enforce
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 4h}
    limits: {max_snooze: 8h}
"""


@pytest.fixture
def cloud() -> FakeCloud:
    fake = FakeCloud(ManualClock(T0))
    fake.add("i-idle")
    return fake


@pytest.fixture
def engine(db_url: str, cloud: FakeCloud) -> Iterator[Engine]:
    eng = make_engine(db_url, POLICY, cloud)
    eng.run_cycle()  # warned: the deadline is 4 hours away
    yield eng
    eng.db.dispose()


@pytest.fixture
def click(engine: Engine, cloud: FakeCloud) -> Iterator[Click]:
    app = Starlette(routes=slack_routes(
        SECRET, journal_actions(engine.db, cloud.clock, timedelta(hours=24))))
    with serve(app, free_port()) as base:
        def send(action: str, choice: str | None = None) -> str:
            value = {"a": action, "p": "idle", "pr": "sim", "i": "i-idle"}
            if choice:
                value["for"] = choice
            payload = {"type": "block_actions", "user": {"id": "U0ANA0001", "name": "ana"},
                       "actions": [{"action_id": "costguard_x", "value": json.dumps(value)}]}
            body = urlencode({"payload": json.dumps(payload)}).encode()
            ts = str(int(time.time()))
            sig = hmac.new(SECRET.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256)
            resp = httpx.post(f"{base}/slack/actions", content=body, headers={
                "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={sig.hexdigest()}",
                "Content-Type": "application/x-www-form-urlencoded"})
            assert resp.status_code == 200
            return str(resp.json()["text"])
        yield send


def _cycle_after(engine: Engine, cloud: FakeCloud, minutes: int) -> None:
    cloud.clock.advance(timedelta(minutes=minutes))
    engine.run_cycle()


def test_stop_now_stops_at_the_next_cycle_not_at_the_old_deadline(
        engine: Engine, cloud: FakeCloud, click: Click) -> None:
    st = state_of(engine.db, "idle", "i-idle")
    assert st is not None and st.deadline == T0 + timedelta(hours=4)
    cloud.clock.advance(timedelta(minutes=1))
    assert "stops at the next cycle" in click("stop-now")
    _cycle_after(engine, cloud, 4)
    assert cloud.instances["i-idle"].state == "stopped"
    stops = [j for j in journal(engine.db, "i-idle") if j.action == "stop"]
    assert [j.status for j in stops] == ["done"]
    assert stops[0].intent_at == T0 + timedelta(minutes=5)
    asked = [j for j in journal(engine.db, "i-idle") if j.action == "stop-now"]
    assert "slack user ana (U0ANA0001)" in asked[0].detail


@pytest.mark.parametrize("cycle_between", [True, False], ids=["snoozed", "snooze-pending"])
def test_stop_now_after_a_snooze_ends_the_snooze_and_stops(
        engine: Engine, cloud: FakeCloud, click: Click, cycle_between: bool) -> None:
    assert "snoozed until" in click("snooze", "4h")
    if cycle_between:
        _cycle_after(engine, cloud, 5)
        st = state_of(engine.db, "idle", "i-idle")
        assert st is not None and st.state == "snoozed"
    assert "stops at the next cycle" in click("stop-now")
    _cycle_after(engine, cloud, 5)
    assert cloud.instances["i-idle"].state == "stopped"
    detail = next(j.detail for j in journal(engine.db, "i-idle") if j.action == "stop-now")
    assert "its snooze ended" in detail


def test_snooze_click_holds_the_stop_past_the_deadline(
        engine: Engine, cloud: FakeCloud, click: Click) -> None:
    cloud.clock.advance(timedelta(hours=3, minutes=55))
    click("snooze", "4h")
    _cycle_after(engine, cloud, 10)  # past the 4h deadline
    assert cloud.instances["i-idle"].state == "running"
    assert ("stop", "i-idle") not in cloud.calls


def test_stop_now_on_an_instance_that_got_busy_does_not_stop_it(
        engine: Engine, cloud: FakeCloud, click: Click) -> None:
    click("stop-now")
    cloud.busy["i-idle"] = True
    for _ in range(3):  # the idle window must see the busy minutes
        _cycle_after(engine, cloud, 20)
    assert cloud.instances["i-idle"].state == "running"
    assert ("stop", "i-idle") not in cloud.calls
