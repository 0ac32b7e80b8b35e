"""`costguard alerts test` and `costguard alerts list` on a real store and real receivers."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.alerts.commands import alerts_app, send_sample
from costguard.alerts.dispatcher import Dispatcher
from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.errors import CostguardError
from costguard.store.db import Database
from tests.alerts.fakes import Mailbox, SlackFake, self_signed_cert, smtp_server
from tests.alerts.helpers import T0, deliveries, idle_warning, slack_bot, smtp
from tests.fakes.loopback import free_port, serve

runner = CliRunner()
WIRED = Settings.model_fields["alerts"].annotation is AlertsSettings



def test_sample_to_a_slack_channel_is_sent_there_only(db: Database) -> None:
    fake = SlackFake()
    idle_warning(db)  # a real pending alert must not go out with the sample
    with serve(fake.app(), free_port()) as base:
        lines = send_sample(db, slack_bot(base, console=True), "slack:#finops", ManualClock(T0))
    assert lines == [f"sent to slack:#finops (id {fake.posts[0]['ts']})"]
    assert len(fake.posts) == 1 and fake.posts[0]["channel"] == "CFINOPS01"
    assert "[sample]" in fake.posts[0]["text"] and "Stop now" in str(fake.posts[0]["blocks"])


def test_sample_email_arrives(db: Database, tmp_path: Path) -> None:
    cert, box = self_signed_cert(tmp_path), Mailbox()
    with smtp_server(box, cert, free_port()) as port:
        lines = send_sample(db, smtp(port, cert[0]), "email:finops@example.com",
                            ManualClock(T0))
    assert lines[0].startswith("sent to email:finops@example.com (id <")
    assert box.envelopes[0][1] == ["finops@example.com"]


def test_sample_to_an_unconfigured_channel_explains_why(db: Database) -> None:
    with pytest.raises(CostguardError, match=r"nothing sent to email:a@b\.co"):
        send_sample(db, AlertsSettings(), "email:a@b.co", ManualClock(T0))


@pytest.fixture
def outbox(db: Database, tmp_path: Path) -> Path:
    """Two deliveries after one dispatch: #finops pending (Slack answered 500), #gone failed
    (channel_not_found); returns a config file pointing at the store."""
    fake = SlackFake()
    idle_warning(db, recipients=("slack:#finops",))
    idle_warning(db, recipients=("slack:#gone",), key="other")
    with serve(fake.app(), free_port()) as base:
        fake.answer_next(500)
        Dispatcher(db, slack_bot(base)).run(T0)
    config = tmp_path / "costguard.yaml"
    config.write_text(f"database_url: '{db.url}'\n")
    return config


def test_list_shows_pending_and_failed_deliveries(outbox: Path) -> None:
    config = outbox
    pending = runner.invoke(alerts_app, ["list", "--pending", "--config", str(config)])
    assert pending.exit_code == 0, pending.output
    assert "slack:#finops" in pending.output and "pending" in pending.output
    assert "slack:#gone" not in pending.output
    assert "Slack API error 500" in pending.output
    failed = runner.invoke(alerts_app, ["list", "--failed", "--config", str(config)])
    assert "slack:#gone" in failed.output and "channel_not_found" in failed.output
    assert "slack:#finops" not in failed.output


def test_list_as_json_gives_each_delivery_with_its_error_and_next_try(outbox: Path) -> None:
    config = outbox
    listed = runner.invoke(alerts_app, ["list", "--format", "json", "--config", str(config)])
    assert listed.exit_code == 0, listed.output
    doc = json.loads(listed.output)
    by_target = {d["target"]: d for d in doc["deliveries"]}
    assert set(by_target) == {"#finops", "#gone"} and doc["unrouted"] == []
    retrying, gone = by_target["#finops"], by_target["#gone"]
    assert (retrying["status"], retrying["channel"], retrying["attempts"]) == (
        "pending", "slack", 1)
    assert "Slack API error 500" in retrying["last_error"]
    assert retrying["next_attempt_at"] > T0.isoformat() and retrying["sent_at"] is None
    assert gone["status"] == "failed" and "channel_not_found" in gone["last_error"]
    assert retrying["subject"] == gone["subject"] != "daily digest"
    one = runner.invoke(alerts_app, ["list", "--format", "json", "--failed", "--pending",
                                       "--limit", "1", "--config", str(config)])
    assert len(json.loads(one.output)["deliveries"]) == 1


def test_list_on_an_empty_outbox(tmp_path: Path) -> None:
    config = tmp_path / "costguard.yaml"
    config.write_text(f"database_url: 'sqlite:///{tmp_path / 'c.db'}'\n")
    # a read command creates no store: with none there it says so
    missing = runner.invoke(alerts_app, ["list", "--config", str(config)])
    assert missing.exit_code == 2 and "no costguard database" in missing.output
    from costguard.store.db import Database

    Database(f"sqlite:///{tmp_path / 'c.db'}").dispose()
    result = runner.invoke(alerts_app, ["list", "--config", str(config)])
    assert result.exit_code == 0 and "no alerts" in result.output


def test_test_command_rejects_a_bad_recipient() -> None:
    result = runner.invoke(alerts_app, ["test", "--to", "slack:finops"])
    assert result.exit_code == 2
    assert "invalid recipient" in result.output


@pytest.mark.skipif(not WIRED, reason="costguard.config does not use AlertsSettings yet")
def test_test_command_sends_through_the_configured_webhook(tmp_path: Path) -> None:
    fake = SlackFake()
    with serve(fake.app(), free_port()) as base:
        config = tmp_path / "costguard.yaml"
        config.write_text(
            f"database_url: 'sqlite:///{tmp_path / 'c.db'}'\n"
            f"alerts:\n  slack:\n    webhook_url: '{base}/services/T0000/B0000/hooksecretXYZ123'\n")
        result = runner.invoke(alerts_app, ["test", "--to", "slack:#finops",
                                            "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "sent to slack:webhook" in result.output and len(fake.webhook_posts) == 1
    assert "hooksecret" not in result.output


def test_backoff_doubles_up_to_its_cap(db: Database) -> None:
    idle_warning(db, recipients=("slack:#finops",))
    settings = slack_bot(f"http://127.0.0.1:{free_port()}", backoff={"initial": "30s",
                                                                      "max": "2m"})
    now, delays = T0, []
    for _ in range(4):
        Dispatcher(db, settings).run(now)
        nxt = deliveries(db)[0].next_attempt_at
        delays.append(nxt - now)
        now = nxt
    assert delays == [timedelta(seconds=30), timedelta(minutes=1), timedelta(minutes=2),
                      timedelta(minutes=2)]
