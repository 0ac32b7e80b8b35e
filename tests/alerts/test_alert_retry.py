"""`costguard alerts retry` and `alerts list --unconfirmed`, against real receivers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from costguard import cli_common
from costguard.alerts.commands import alerts_app
from costguard.alerts.dispatcher import Dispatcher
from costguard.alerts.retry import requeue
from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock, utc
from costguard.daemon.health import gather_status
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow
from tests.alerts.fakes import SlackFake
from tests.alerts.helpers import T0, alerts, deliveries, idle_warning, slack_bot, slack_webhook
from tests.fakes.loopback import free_port, serve

runner = CliRunner()


@pytest.fixture
def slack() -> Iterator[tuple[SlackFake, str]]:
    fake = SlackFake()
    with serve(fake.app(), free_port()) as base:
        yield fake, base


def _config(tmp_path: Path, db: Database) -> str:
    path = tmp_path / "costguard.yaml"
    path.write_text(f"database_url: '{db.url}'\n")
    return str(path)


def _journal(db: Database) -> list[ActionJournalRow]:
    with db.session() as s:
        return list(s.exec(select(ActionJournalRow).where(
            ActionJournalRow.action == "alert-retry")))


def _interrupted_webhook_send(db: Database, base: str) -> None:
    def crash(point: str) -> None:
        if point == "after-send":
            raise SystemExit("killed")

    with pytest.raises(SystemExit):
        Dispatcher(db, slack_webhook(base), fault=crash).run(T0)
    Dispatcher(db, slack_webhook(base)).run(T0 + timedelta(minutes=10))


def test_unconfirmed_webhook_send_is_listed_and_resent_once_on_request(
        db: Database, slack: tuple[SlackFake, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake, base = slack
    asked = T0 + timedelta(minutes=20)  # when the operator runs `alerts retry`
    monkeypatch.setattr(cli_common, "CLOCK", ManualClock(asked))
    idle_warning(db, recipients=("slack:#finops",))
    _interrupted_webhook_send(db, base)
    assert len(fake.webhook_posts) == 1 and deliveries(db)[0].status == "unconfirmed"
    assert gather_status(db, T0, 60)["unconfirmed_alert_deliveries"] == 1
    config = _config(tmp_path, db)
    listed = runner.invoke(alerts_app, ["list", "--unconfirmed", "--config", config])
    assert listed.exit_code == 0, listed.output
    assert "unconfirmed" in listed.output and "slack:webhook" in listed.output
    assert "costguard alerts retry 1" in listed.output
    # the operator looked in the channel, did not find it, and asks again
    retried = runner.invoke(alerts_app, ["retry", "1", "--config", config])
    assert retried.exit_code == 0, retried.output
    assert "requeued 1 (alert to slack:webhook, was unconfirmed)" in retried.output
    row = deliveries(db)[0]
    assert (row.status, row.attempts) == ("pending", 0)
    assert row.next_attempt_at is not None and utc(row.next_attempt_at) == asked  # the CLI's clock
    assert alerts(db)[0].status == "routed"
    later = asked + timedelta(seconds=1)
    assert Dispatcher(db, slack_webhook(base)).run(later).sent == 1
    assert Dispatcher(db, slack_webhook(base)).run(later + timedelta(hours=1)).sent == 0
    assert len(fake.webhook_posts) == 2
    assert deliveries(db)[0].status == "sent" and alerts(db)[0].status == "sent"
    assert gather_status(db, T0, 60)["unconfirmed_alert_deliveries"] == 0
    [entry] = _journal(db)
    assert entry.instance_id == "i-0abc000000000000" and entry.status == "requested"
    assert entry.detail.startswith("operator ") and "was unconfirmed" in entry.detail


def test_a_sent_message_is_never_requeued(
        db: Database, slack: tuple[SlackFake, str], tmp_path: Path) -> None:
    fake, base = slack
    idle_warning(db, recipients=("slack:#finops",))
    Dispatcher(db, slack_bot(base)).run(T0)
    result = runner.invoke(alerts_app, ["retry", "1", "--config", _config(tmp_path, db)])
    assert result.exit_code == 1
    assert "never sent twice" in result.output
    assert deliveries(db)[0].status == "sent" and _journal(db) == []
    Dispatcher(db, slack_bot(base)).run(datetime.now(UTC) + timedelta(hours=1))
    assert len(fake.posts) == 1


def test_unknown_id_and_missing_selection_are_errors(db: Database, tmp_path: Path) -> None:
    config = _config(tmp_path, db)
    assert runner.invoke(alerts_app, ["retry", "--config", config]).exit_code == 2
    result = runner.invoke(alerts_app, ["retry", "99", "--config", config])
    assert result.exit_code == 1 and "no such delivery" in result.output


def test_failed_deliveries_and_unroutable_alerts_go_again_after_the_fix(
        db: Database, slack: tuple[SlackFake, str]) -> None:
    fake, base = slack
    idle_warning(db, recipients=("slack:#data-eng",))  # no such channel yet
    Dispatcher(db, slack_bot(base)).run(T0)
    idle_warning(db, recipients=("slack:#finops",), key="second")
    Dispatcher(db, AlertsSettings(console=False)).run(T0)  # no channel configured
    statuses = {d.target: d.status for d in deliveries(db)}
    assert statuses == {"#data-eng": "failed"}
    assert [a.status for a in alerts(db)] == ["failed", "failed"]
    fake.channels["#data-eng"] = "CDATAENG01"  # someone creates the channel
    result = requeue(db, T0 + timedelta(hours=1), "operator ana", failed=True)
    assert [q.to for q in result.requeued] == ["slack:#data-eng"]
    assert [i for i, _ in result.rerouted] == [alerts(db)[1].id]
    stats = Dispatcher(db, slack_bot(base)).run(T0 + timedelta(hours=1))
    assert stats.routed == 1 and stats.sent == 2
    assert {p["channel"] for p in fake.posts} == {"CDATAENG01", "CFINOPS01"}
    assert [a.status for a in alerts(db)] == ["sent", "sent"]
    assert len(_journal(db)) == 2
    again = requeue(db, T0 + timedelta(hours=2), "operator ana", failed=True,
                    unconfirmed=True)
    assert not (again.requeued or again.rerouted or again.refused)


def test_retrying_a_failed_digest_member_sends_the_digest_once(
        db: Database, slack: tuple[SlackFake, str], tmp_path: Path) -> None:
    fake, base = slack
    routes = tmp_path / "routes.yaml"
    routes.write_text("routes:\n  - match: {kind: finding}\n    digest: true\n")
    settings = slack_bot(base, routing_file=str(routes), max_attempts=1)
    idle_warning(db, 2, recipients=("slack:#ml-costs",), kind="finding", severity="info")
    Dispatcher(db, settings).run(T0)
    morning = T0 + timedelta(hours=19, minutes=30)
    fake.answer_next(500)
    Dispatcher(db, settings).run(morning)
    assert {d.status for d in deliveries(db)} == {"failed"}
    member = deliveries(db, kind="alert")[0]
    result = requeue(db, morning, "operator ana", ids=[member.id or 0])
    assert [q.kind for q in result.requeued] == ["digest"]
    assert {d.status for d in deliveries(db, kind="alert")} == {"held"}
    assert Dispatcher(db, settings).run(morning + timedelta(minutes=1)).sent == 1
    assert len(fake.posts) == 1 and "2 alerts" in fake.posts[0]["text"]
    assert {d.status for d in deliveries(db, kind="alert")} == {"digested"}
    assert [a.status for a in alerts(db)] == ["sent", "sent"]
    assert json.dumps(fake.posts[0]["blocks"]).count("trainer-") == 2
