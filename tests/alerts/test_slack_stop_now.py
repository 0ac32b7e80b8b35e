"""A Slack click, then the next engine cycle: "stop now" stops, "snooze" holds, busy wins.

The engine runs on the scripted cloud of tests/fakes (an idle instance whose stop is a
counted call); clicks go over real HTTP to the signed interactivity endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from urllib.parse import urlencode

import httpx
import pytest
from starlette.applications import Starlette

from costguard.alerts.interactive import journal_actions, slack_routes
from costguard.clock import ManualClock
from costguard.engine import Engine
from tests.alerts.helpers import slack_signed
from tests.fakes.cloud import BUSY, T0, ScriptedCloud, full_cloud
from tests.fakes.loopback import serve
from tests.fakes.scenario import idle_stop_policy, journal, make_engine, state_of

Click = Callable[..., str]
SECRET = "stop-now-signing-secret-0001"
POLICY = idle_stop_policy(grace="4h", max_snooze="8h")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def cloud(clock: ManualClock) -> ScriptedCloud:
    fake = full_cloud(clock)
    fake.add("i-idle")
    return fake


@pytest.fixture
def engine(db_url: str, cloud: ScriptedCloud) -> Iterator[Engine]:
    eng = make_engine(db_url, POLICY, cloud)
    eng.run_cycle()  # warned: the deadline is 4 hours away
    yield eng
    eng.db.dispose()


@pytest.fixture
def click(engine: Engine, clock: ManualClock) -> Iterator[Click]:
    app = Starlette(routes=slack_routes(
        SECRET, journal_actions(engine.db, clock, timedelta(hours=24))))
    with serve(app) as base:
        def send(action: str, choice: str | None = None) -> str:
            value = {"a": action, "p": "idle", "pr": "sim", "i": "i-idle"}
            if choice:
                value["for"] = choice
            payload = {"type": "block_actions", "user": {"id": "U0ANA0001", "name": "ana"},
                       "actions": [{"action_id": "costguard_x", "value": json.dumps(value)}]}
            body = urlencode({"payload": json.dumps(payload)}).encode()
            resp = httpx.post(f"{base}/slack/actions", content=body,
                              headers=slack_signed(body, SECRET))
            assert resp.status_code == 200
            return str(resp.json()["text"])
        yield send


def _cycle_after(engine: Engine, clock: ManualClock, minutes: int) -> None:
    clock.advance(timedelta(minutes=minutes))
    engine.run_cycle()


def test_stop_now_stops_at_the_next_cycle_not_at_the_old_deadline(
        engine: Engine, cloud: ScriptedCloud, clock: ManualClock, click: Click) -> None:
    st = state_of(engine.db, "idle", "i-idle")
    assert st is not None and st.deadline == T0 + timedelta(hours=4)
    clock.advance(timedelta(minutes=1))
    assert "stops at the next cycle" in click("stop-now")
    _cycle_after(engine, clock, 4)
    assert cloud.instances["i-idle"].state == "stopped"
    stops = [j for j in journal(engine.db, "i-idle") if j.action == "stop"]
    assert [j.status for j in stops] == ["done"]
    assert stops[0].intent_at == T0 + timedelta(minutes=5)
    asked = [j for j in journal(engine.db, "i-idle") if j.action == "stop-now"]
    assert "slack user ana (U0ANA0001)" in asked[0].detail


@pytest.mark.parametrize("cycle_between", [True, False], ids=["snoozed", "snooze-pending"])
def test_stop_now_after_a_snooze_ends_the_snooze_and_stops(
        engine: Engine, cloud: ScriptedCloud, clock: ManualClock, click: Click,
        cycle_between: bool) -> None:
    assert "snoozed until" in click("snooze", "4h")
    if cycle_between:
        _cycle_after(engine, clock, 5)
        st = state_of(engine.db, "idle", "i-idle")
        assert st is not None and st.state == "snoozed"
    assert "stops at the next cycle" in click("stop-now")
    _cycle_after(engine, clock, 5)
    assert cloud.instances["i-idle"].state == "stopped"
    detail = next(j.detail for j in journal(engine.db, "i-idle") if j.action == "stop-now")
    assert "its snooze ended" in detail


def test_snooze_click_holds_the_stop_past_the_deadline(
        engine: Engine, cloud: ScriptedCloud, clock: ManualClock, click: Click) -> None:
    clock.advance(timedelta(hours=3, minutes=55))
    click("snooze", "4h")
    _cycle_after(engine, clock, 10)  # past the 4h deadline
    assert cloud.instances["i-idle"].state == "running"
    assert cloud.calls["stop"] == 0


def test_stop_now_on_an_instance_that_got_busy_does_not_stop_it(
        engine: Engine, cloud: ScriptedCloud, clock: ManualClock, click: Click) -> None:
    click("stop-now")
    cloud.phases["i-idle"] = BUSY
    for _ in range(3):  # the idle window must see the busy minutes
        _cycle_after(engine, clock, 20)
    assert cloud.instances["i-idle"].state == "running"
    assert cloud.calls["stop"] == 0
