"""Slack delivery against a real HTTP server on 127.0.0.1: content, retries, 429, crashes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from costguard.alerts.dispatcher import Dispatcher, dispatch
from costguard.alerts.routing import Router, parse_routing
from costguard.store.db import Database
from tests.alerts.fakes import BOT_TOKEN, SlackFake
from tests.alerts.helpers import T0, alerts, deliveries, idle_warning, slack_bot, slack_webhook
from tests.fakes.loopback import free_port, serve

ROUTES = """\
teams:
  research: {slack: "#research-gpu"}
owners:
  ana: {slack: U0ANA0001}
routes:
  - match: {kind: idle-warning}
    to: [owner]
fallback: ["slack:#finops"]
"""


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.dispose()


def _slack_time() -> float:
    return (T0 + timedelta(seconds=5)).timestamp()  # Slack's clock agrees with the test's


@pytest.fixture
def slack() -> Iterator[tuple[SlackFake, str]]:
    fake = SlackFake(clock=_slack_time)
    with serve(fake.app(), free_port()) as base:
        yield fake, base


def _router() -> Router:
    return Router(parse_routing(ROUTES, "routes.yaml"))


def _text_of(post: dict[str, object]) -> str:
    return json.dumps(post["blocks"])


def test_idle_warning_reaches_team_channel_and_owner_dm_with_buttons(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db)
    stats = Dispatcher(db, slack_bot(base), router=_router()).run(T0)
    assert stats.sent == 2 and stats.failed == 0
    team, dm = fake.messages("CRESEARCH1"), fake.messages("D0ANA0001")
    assert len(team) == 1 and len(dm) == 1
    blocks = _text_of(team[0])
    for expected in ("i-0abc000000000000", "research", "all 8 GPUs idle for 1h",
                     "$98.32/h", "2026-03-02 14:15 UTC", "sm_active p95 0.4%",
                     "Snooze 1h", "Snooze 4h", "Until tomorrow", "Stop now",
                     "costguard snooze i-0abc000000000000 --for 4h"):
        assert expected in blocks, expected
    assert fake.auth_headers[0] == f"Bearer {BOT_TOKEN}"
    sent = deliveries(db)
    assert {d.external_id for d in sent} == {team[0]["ts"], dm[0]["ts"]}
    assert all(d.status == "sent" for d in sent)
    assert alerts(db)[0].status == "sent"


def test_snooze_buttons_respect_the_configured_cap(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, recipients=("slack:#finops",))
    Dispatcher(db, slack_bot(base, max_snooze="2h")).run(T0)
    labels = [e["text"]["text"] for b in fake.posts[0]["blocks"] if b["type"] == "actions"
              for e in b["elements"]]
    assert labels == ["Snooze 1h", "Snooze 2h (max)", "Stop now"]


def test_unattributed_alert_goes_to_the_fallback_channel(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, recipients=("unattributed",), team=None, owner=None, kind="gap")
    Dispatcher(db, slack_bot(base), router=_router()).run(T0)
    assert len(fake.messages("CFINOPS01")) == 1
    assert len(fake.posts) == 1


def test_receiver_down_then_up_delivers_every_alert_exactly_once(db: Database) -> None:
    fake, port = SlackFake(), free_port()
    base = f"http://127.0.0.1:{port}"
    idle_warning(db, 5, recipients=("slack:#finops",))
    settings = slack_bot(base)
    first = Dispatcher(db, settings).run(T0)  # nobody listening
    assert first.sent == 0 and first.retrying == 5
    assert {d.attempts for d in deliveries(db)} == {1}
    second = Dispatcher(db, settings).run(T0 + timedelta(seconds=10))  # backoff not over
    assert second.sent == 0 and second.retrying == 0
    with serve(fake.app(), port):
        fake.answer_next(500, times=2)
        third = Dispatcher(db, settings).run(T0 + timedelta(seconds=31))
        assert third.sent == 3 and third.retrying == 2
        later = T0 + timedelta(minutes=5)
        assert Dispatcher(db, settings).run(later).sent == 2
        assert Dispatcher(db, settings).run(later + timedelta(hours=1)).sent == 0
    keys = [p["metadata"]["event_payload"]["dedupe_key"] for p in fake.posts]
    assert len(keys) == 5 and len(set(keys)) == 5
    assert all(a.status == "sent" for a in alerts(db))


def test_rate_limit_waits_for_retry_after_without_spending_attempts(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, 3, recipients=("slack:#finops",))
    fake.answer_next(429, retry_after=120)
    stats = Dispatcher(db, slack_bot(base)).run(T0)
    # the 429 pauses Slack for this pass: the other two wait as well, none is lost
    assert stats.sent == 0 and stats.deferred == 3
    rows = deliveries(db)
    assert all(r.status == "pending" and r.attempts == 0 for r in rows)
    assert rows[0].next_attempt_at == T0 + timedelta(seconds=120)
    assert Dispatcher(db, slack_bot(base)).run(T0 + timedelta(seconds=60)).sent == 0
    assert Dispatcher(db, slack_bot(base)).run(T0 + timedelta(seconds=120)).sent == 3
    assert fake.calls.count("chat.postMessage") == 4


def test_gives_up_after_max_attempts_and_says_why(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, recipients=("slack:#finops",))
    fake.answer_next(500, times=10)
    settings = slack_bot(base, max_attempts=3)
    now = T0
    for _ in range(5):
        Dispatcher(db, settings).run(now)
        now += timedelta(hours=1)
    row = deliveries(db)[0]
    assert row.status == "failed" and row.attempts == 3
    assert "500" in (row.last_error or "")
    assert alerts(db)[0].status == "failed"


def test_unknown_channel_fails_at_once(db: Database, slack: tuple[SlackFake, str]) -> None:
    _, base = slack
    idle_warning(db, recipients=("slack:#no-such-channel",))
    stats = Dispatcher(db, slack_bot(base)).run(T0)
    assert stats.failed == 1
    assert "channel_not_found" in (deliveries(db)[0].last_error or "")


def test_crash_after_post_is_not_posted_again_after_restart(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, 2, recipients=("slack:#finops",))

    def crash(point: str) -> None:
        if point == "after-send":
            raise SystemExit("killed between send and mark-sent")

    with pytest.raises(SystemExit):
        Dispatcher(db, slack_bot(base), fault=crash).run(T0)
    assert len(fake.posts) == 1
    assert [d.status for d in deliveries(db)] == ["sending", "pending"]
    # a fresh process, later: the history shows the first message arrived
    stats = Dispatcher(db, slack_bot(base)).run(T0 + timedelta(minutes=10))
    assert stats.recovered == 1 and stats.sent == 1
    assert len(fake.posts) == 2
    rows = deliveries(db)
    assert [r.status for r in rows] == ["sent", "sent"]
    assert rows[0].external_id == fake.posts[0]["ts"]


def _crash_at(where: str) -> Callable[[str], None]:
    def crash(point: str) -> None:
        if point == where:
            raise SystemExit(f"killed at {where}")
    return crash


def test_crash_after_post_is_found_in_a_busy_channel_by_its_metadata(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    fake.page_size = 100
    # someone else's message before the claim's window, and 250 chatty ones after the post
    fake.posts.append({"channel": "CFINOPS01", "ts": f"{_slack_time() - 3600:.6f}",
                       "text": "old", "metadata": {"event_type": "costguard_alert",
                                                   "event_payload": {"dedupe_key": "x"}}})
    idle_warning(db, recipients=("slack:#finops",))
    with pytest.raises(SystemExit):
        Dispatcher(db, slack_bot(base), fault=_crash_at("after-send")).run(T0)
    ours = fake.posts[-1]
    fake.posts += [{"channel": "CFINOPS01", "ts": f"{int(_slack_time()) + 1}.{i:06d}",
                    "text": f"chatter {i}"} for i in range(250)]
    stats = Dispatcher(db, slack_bot(base)).run(T0 + timedelta(minutes=10))
    assert stats.recovered == 1 and stats.sent == 0
    row = deliveries(db)[0]
    assert row.status == "sent" and row.external_id == ours["ts"]
    assert len([p for p in fake.posts if p.get("metadata")]) == 2  # not posted again
    # the window since the attempt, with metadata, page after page
    assert len(fake.history_calls) == 3
    first = fake.history_calls[0]
    assert float(first["oldest"]) == T0.timestamp() - 60
    assert first["include_all_metadata"] in ("1", "true", True)


def test_error_after_slack_took_the_post_is_not_posted_twice(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, recipients=("slack:#finops",))
    fake.fail_after_post = [500]  # Slack stored it, then answered 500
    first = Dispatcher(db, slack_bot(base)).run(T0)
    assert first.retrying == 1 and len(fake.posts) == 1
    second = Dispatcher(db, slack_bot(base)).run(T0 + timedelta(minutes=1))
    assert second.sent == 1
    assert len(fake.posts) == 1  # the retry read the history and found it
    assert deliveries(db)[0].external_id == fake.posts[0]["ts"]


def test_retry_after_a_refused_connection_posts_once(db: Database) -> None:
    fake, port = SlackFake(clock=_slack_time), free_port()
    idle_warning(db, recipients=("slack:#finops",))
    settings = slack_bot(f"http://127.0.0.1:{port}")
    assert Dispatcher(db, settings).run(T0).retrying == 1  # nobody listening
    with serve(fake.app(), port):
        assert Dispatcher(db, settings).run(T0 + timedelta(minutes=1)).sent == 1
    assert len(fake.posts) == 1 and fake.calls.count("conversations.history") == 1


def test_interrupted_send_is_unconfirmed_when_the_history_cannot_be_read(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, recipients=("slack:#finops",))
    with pytest.raises(SystemExit):
        Dispatcher(db, slack_bot(base), fault=_crash_at("after-send")).run(T0)
    fake.history_error = "missing_scope"
    stats = Dispatcher(db, slack_bot(base)).run(T0 + timedelta(minutes=10))
    assert stats.recovered == 1 and len(fake.posts) == 1
    row = deliveries(db)[0]
    assert row.status == "unconfirmed" and "missing_scope" in (row.last_error or "")


def test_interrupted_post_to_an_at_name_is_unconfirmed(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, recipients=("slack:@ana",))
    with pytest.raises(SystemExit):
        Dispatcher(db, slack_bot(base), fault=_crash_at("after-send")).run(T0)
    Dispatcher(db, slack_bot(base)).run(T0 + timedelta(minutes=10))
    assert len(fake.posts) == 1 and "conversations.history" not in fake.calls
    assert deliveries(db)[0].status == "unconfirmed"


def test_history_outage_leaves_the_claim_to_be_asked_again(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, recipients=("slack:#finops",))
    with pytest.raises(SystemExit):
        Dispatcher(db, slack_bot(base), fault=_crash_at("after-send")).run(T0)
    fake.answer_next(500)  # scripted answers apply to chat.postMessage only...
    fake.history_error = "internal_error"  # ...so the history fails this way
    assert Dispatcher(db, slack_bot(base)).run(T0 + timedelta(minutes=10)).recovered == 0
    assert deliveries(db)[0].status == "sending"
    fake.history_error, fake.script = None, []
    assert Dispatcher(db, slack_bot(base)).run(T0 + timedelta(minutes=20)).recovered == 1
    assert deliveries(db)[0].status == "sent" and len(fake.posts) == 1


def test_crash_before_post_is_sent_after_restart(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, recipients=("slack:U0ANA0001",))

    def crash(point: str) -> None:
        if point == "before-send":
            raise SystemExit("killed after claiming")

    with pytest.raises(SystemExit):
        Dispatcher(db, slack_bot(base), fault=crash).run(T0)
    assert fake.posts == []
    # a claim younger than claim_timeout may still be in flight elsewhere: left alone
    assert Dispatcher(db, slack_bot(base)).run(T0 + timedelta(minutes=1)).sent == 0
    stats = Dispatcher(db, slack_bot(base)).run(T0 + timedelta(minutes=10))
    assert stats.recovered == 1 and stats.sent == 1
    assert len(fake.messages("D0ANA0001")) == 1


def test_webhook_posts_blocks_and_an_interrupted_webhook_send_is_not_repeated(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, 2, recipients=("slack:#finops", "slack:#research-gpu"))
    calls = []

    def crash(point: str) -> None:
        calls.append(point)
        if point == "after-send" and calls.count("after-send") == 2:
            raise SystemExit("killed")

    with pytest.raises(SystemExit):
        Dispatcher(db, slack_webhook(base), fault=crash).run(T0)
    # one webhook delivery per alert, whatever channels were named
    assert len(fake.webhook_posts) == 2
    assert "Stop now" in json.dumps(fake.webhook_posts[0]["blocks"])
    stats = Dispatcher(db, slack_webhook(base)).run(T0 + timedelta(minutes=10))
    assert stats.recovered == 1
    assert len(fake.webhook_posts) == 2
    assert [d.status for d in deliveries(db)] == ["sent", "unconfirmed"]
    assert all(a.status == "sent" for a in alerts(db))


def test_console_is_one_channel_among_others(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, recipients=("slack:#finops",))
    printed: list[tuple[str, str, str]] = []
    settings = slack_bot(base).model_copy(update={"console": True})
    stats = dispatch(db, settings, T0, printer=lambda *a: printed.append(a))
    assert stats.sent == 2
    assert printed[0][0] == "idle-warning" and len(fake.posts) == 1
    assert dispatch(db, settings, T0 + timedelta(hours=1),
                    printer=lambda *a: printed.append(a)).sent == 0


def test_digest_route_collects_alerts_into_one_daily_message(
        db: Database, slack: tuple[SlackFake, str], tmp_path: Path) -> None:
    fake, base = slack
    routes = tmp_path / "routes.yaml"
    routes.write_text("routes:\n  - match: {kind: finding}\n    digest: true\n")
    settings = slack_bot(base, routing_file=str(routes), digest={"hour_utc": 9})
    idle_warning(db, 3, recipients=("slack:#ml-costs",), kind="finding", severity="info")
    stats = Dispatcher(db, settings).run(T0)  # 14:00: after today's digest, so tomorrow's
    assert stats.held == 3 and stats.sent == 0 and stats.digests == 0
    next_morning = T0 + timedelta(hours=19, minutes=30)  # 09:30 the next day
    assert Dispatcher(db, settings).run(next_morning - timedelta(hours=1)).sent == 0
    stats = Dispatcher(db, settings).run(next_morning)
    assert stats.digests == 1 and stats.sent == 1
    assert len(fake.posts) == 1 and "3 alerts" in fake.posts[0]["text"]
    assert {d.status for d in deliveries(db, kind="alert")} == {"digested"}
    assert all(a.status == "sent" for a in alerts(db))
    # one digest a day: an alert routed after it waits for the next one
    idle_warning(db, 1, recipients=("slack:#ml-costs",), kind="finding", severity="info",
                 now=next_morning, key="late")
    assert Dispatcher(db, settings).run(next_morning + timedelta(hours=1)).sent == 0
    assert Dispatcher(db, settings).run(next_morning + timedelta(days=1)).sent == 1
    assert "1 alert " in fake.posts[1]["text"]
