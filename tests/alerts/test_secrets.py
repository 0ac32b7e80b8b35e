"""Secrets (webhook URL, bot token, SMTP password, signing secret) never reach logs or output."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from starlette.applications import Starlette
from typer.testing import CliRunner

from costguard.alerts.commands import alerts_app
from costguard.alerts.dispatcher import Dispatcher
from costguard.alerts.interactive import journal_actions, slack_routes
from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock
from costguard.errors import ConfigError
from costguard.store.db import Database
from tests.alerts.fakes import (
    BOT_TOKEN,
    LOOPBACK_RESPONSES,
    RESPONSE_PATH,
    SMTP_PASSWORD,
    WEBHOOK_PATH,
    Mailbox,
    SlackFake,
    self_signed_cert,
    smtp_server,
)
from tests.alerts.helpers import (
    T0,
    deliveries,
    idle_warning,
    seed_warned_instance,
    slack_bot,
    slack_signed,
    slack_webhook,
    smtp,
)
from tests.fakes.loopback import free_port, serve

SIGNING = "signing-SECRET-abcdef"
SECRETS = (BOT_TOKEN, SMTP_PASSWORD, WEBHOOK_PATH.rsplit("/", 1)[-1], SIGNING)


def test_secrets_never_appear_in_logs_errors_or_the_cli(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # everything, every logger
    cert = self_signed_cert(tmp_path)
    fake, slack_port, smtp_port = SlackFake(), free_port(), free_port()
    base = f"http://127.0.0.1:{slack_port}"
    settings = [slack_bot(base), slack_webhook(base), smtp(smtp_port, cert[0])]
    dbs = [Database(f"sqlite:///{tmp_path / f'costguard{i}.db'}") for i in range(3)]
    for db in dbs:
        idle_warning(db, 2, recipients=("slack:#finops", "email:ana@example.com"))
        idle_warning(db, 1, recipients=("slack:#nowhere",), key="other")
    # receivers down: connection errors are logged and stored
    for db, s in zip(dbs, settings, strict=True):
        Dispatcher(db, s).run(T0)
    box = Mailbox()
    with serve(fake.app(), slack_port), smtp_server(box, cert, smtp_port):
        fake.answer_next(500, times=1)
        fake.answer_next(429, retry_after=5)
        now = T0
        for _ in range(4):
            now += timedelta(minutes=20)
            for db, s in zip(dbs, settings, strict=True):
                Dispatcher(db, s).run(now)
    assert fake.posts and fake.webhook_posts and box.received  # the secrets were used
    db_url = f"sqlite:///{tmp_path / 'costguard0.db'}"
    config = tmp_path / "costguard.yaml"
    config.write_text(f"database_url: {db_url}\n")
    listing = CliRunner().invoke(alerts_app, ["list", "--config", str(config)])
    assert listing.exit_code == 0, listing.output
    everything = "\n".join([
        caplog.text, listing.output,
        *(d.last_error or "" for db in dbs for d in deliveries(db)),
        repr(settings), str(settings[0].model_dump()),
    ])
    assert "Slack API error" in everything or "500" in everything  # failures were logged
    for secret in SECRETS:
        assert secret not in everything


def test_secrets_can_come_from_files(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(BOT_TOKEN + "\n")
    (tmp_path / "pw").write_text(SMTP_PASSWORD)
    settings = AlertsSettings.model_validate({
        "slack": {"bot_token_file": str(tmp_path / "token")},
        "email": {"host": "smtp.example.com", "from_addr": "c@example.com",
                  "password_file": str(tmp_path / "pw")}})
    token = settings.slack.token()
    assert token is not None and token.get_secret_value() == BOT_TOKEN
    assert settings.email is not None
    password = settings.email.secret_password()
    assert password is not None and password.get_secret_value() == SMTP_PASSWORD
    assert BOT_TOKEN not in repr(settings)


def test_a_missing_secret_file_is_a_clear_config_error(tmp_path: Path) -> None:
    settings = AlertsSettings.model_validate(
        {"slack": {"bot_token_file": str(tmp_path / "missing")}})
    with pytest.raises(ConfigError, match=r"cannot read bot_token_file .*missing"):
        settings.slack.token()


def test_inline_secret_and_file_together_are_refused() -> None:
    with pytest.raises(ValueError, match="give password or password_file, not both"):
        AlertsSettings.model_validate({"email": {
            "host": "h", "from_addr": "c@example.com", "password": "x",
            "password_file": "/run/secrets/pw"}})


def test_a_clicks_response_url_is_never_logged_even_when_the_update_fails(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    db = Database(f"sqlite:///{tmp_path / 'c.db'}")
    seed_warned_instance(db)
    app = Starlette(routes=slack_routes(SIGNING, journal_actions(
        db, ManualClock(T0), timedelta(hours=24)), response_urls=LOOPBACK_RESPONSES))
    down = f"http://127.0.0.1:{free_port()}{RESPONSE_PATH}"  # nobody listening
    with serve(app, free_port()) as base:
        value = {"a": "snooze", "p": "idle-gpu", "pr": "sim", "i": "i-0abc000000000000",
                 "for": "1h"}
        payload = {"type": "block_actions", "user": {"id": "U0ANA0001"}, "response_url": down,
                   "message": {"text": "t", "blocks": [{"type": "section", "text": {
                       "type": "mrkdwn", "text": "x"}}]},
                   "actions": [{"action_id": "costguard_x", "value": json.dumps(value)}]}
        body = urlencode({"payload": json.dumps(payload)}).encode()
        resp = httpx.post(f"{base}/slack/actions", content=body,
                          headers=slack_signed(body, SIGNING))
        assert resp.status_code == 200
        for _ in range(500):  # the update runs after the answer
            if "could not update the Slack message" in caplog.text:
                break
            time.sleep(0.01)
    db.dispose()
    assert "could not update the Slack message" in caplog.text
    assert "responseSECRET77" not in caplog.text
    assert SIGNING not in caplog.text
