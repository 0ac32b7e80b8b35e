"""No secret in any log line, the libraries' included: each configured secret is planted, each
integration is broken the ways that make it log (a mistyped URL, a host nobody listens on, a
4xx, a 5xx), and everything printed is searched. Before, a mistyped Slack webhook URL was
printed in full by the Slack SDK's logger, past costguard's redaction and JSON format."""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from costguard.alerts.settings import SlackSettings
from costguard.alerts.slack import SlackSender
from costguard.daemon.logs import configure_logging
from costguard.redact import redact, register, register_settings
from tests.fakes.loopback import free_port, serve
from tests.reliability import figures

WEBHOOK_KEY = "T0SECRET1/B0SECRET2/xyzSECRETxyzSECRETxyz12"
BOT = "xoxb-1234567890-SECRETSECRET-abcdefabcdef"


@pytest.fixture
def printed() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    before = logging.getLogger().handlers[:]
    configure_logging("json", "DEBUG", stream=stream)
    # a library that brought a handler of its own (as slack_sdk clients can be given)
    logging.getLogger("slack_sdk").addHandler(logging.StreamHandler(stream))
    configure_logging("json", "DEBUG", stream=stream)
    yield stream
    logging.captureWarnings(False)
    root = logging.getLogger()
    for h in root.handlers[:]:
        root.removeHandler(h)
    for h in before:
        root.addHandler(h)


def _lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize("kind", ["no scheme", "nobody listens", "4xx", "5xx"])
def test_a_broken_slack_webhook_never_prints_its_url(printed: io.StringIO, kind: str) -> None:
    if kind in ("4xx", "5xx"):
        status = 404 if kind == "4xx" else 500

        async def app(scope, receive, send):  # type: ignore[no-untyped-def]
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b"no_service"})

        with serve(app, free_port()) as base:
            url = f"{base}/services/{WEBHOOK_KEY}"
            _deliver(url)
    elif kind == "nobody listens":
        url = f"http://127.0.0.1:{free_port()}/services/{WEBHOOK_KEY}"
        _deliver(url)
    else:
        url = f"hooks.slack.com/services/{WEBHOOK_KEY}"  # the scheme forgotten
        _deliver(url)
    lines = _lines(printed)
    assert lines, "the failure was logged"
    figures.count("planted secrets kept out of every log line (per broken integration)",
                  not any(WEBHOOK_KEY in line for line in lines))
    for line in lines:
        assert WEBHOOK_KEY not in line and "SECRET" not in line, line
        json.loads(line)  # costguard's format, the library's lines included


def _deliver(url: str) -> None:
    """Send one alert through the Slack sender as the dispatcher does, logging its failure."""
    from costguard.alerts.errors import DeliveryError
    from costguard.config import Settings

    settings = SlackSettings(webhook_url=SecretStr(url), timeout_s=2)
    # as every command does once it has loaded its settings (cli_common)
    register_settings(Settings(alerts={"slack": settings.model_dump()}))
    sender = SlackSender(settings)
    log = logging.getLogger("costguard.alerts.dispatch")
    try:
        sender._send_webhook({"text": "t", "blocks": []})
    except DeliveryError as exc:
        log.warning("delivery failed: %s", exc)
    # and what the SDK itself says at DEBUG, were it to reach the handler
    logging.getLogger("slack_sdk.webhook.client").warning("request to %s failed", url)
    logging.getLogger("urllib3.connectionpool").warning("Retrying %s", url)


def test_secrets_registered_from_settings_are_masked_in_every_logger(
        printed: io.StringIO) -> None:
    register(["hunter2-db-password", "agent-token-77xy"])
    for name in ("costguard.engine", "botocore.endpoint", "google.auth.transport",
                 "uvicorn.error", "urllib3.connectionpool"):
        logging.getLogger(name).error("connecting with hunter2-db-password and "
                                      "Bearer agent-token-77xy")
    text = printed.getvalue()
    assert "hunter2" not in text and "agent-token-77xy" not in text
    assert text.count("***") >= 10


def test_a_librarys_warning_is_a_log_line_in_the_format_and_redacted(
        printed: io.StringIO) -> None:
    # as cryptography 51 warns on a DSA key (AWS's pkcs7 identity documents): printed by
    # `warnings` itself, the line was plain text in a JSON log, and not redacted
    register(["warned-secret-5521"])
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library is deprecated; connecting with warned-secret-5521",
                      UserWarning, stacklevel=1)
    lines = _lines(printed)
    assert lines, "the warning printed nothing"
    records = [json.loads(line) for line in lines]  # every line JSON
    assert any("a library is deprecated" in r["msg"] and r["logger"] == "py.warnings"
               and r["level"] == "warning" for r in records), records
    assert "warned-secret-5521" not in printed.getvalue()


def test_awss_dsa_certificates_load_without_a_warning() -> None:
    from costguard.daemon.aws_certificates import CertificateSet

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        CertificateSet()
    assert not [w for w in caught if "DSA" in str(w.message)]


@pytest.mark.parametrize(("text", "leaked"), [
    (f"POST https://hooks.slack.com/services/{WEBHOOK_KEY} failed", WEBHOOK_KEY),
    (f"token={BOT}", BOT),
    ("headers: {'Authorization': 'Bearer abcdefgh12345678'}", "abcdefgh12345678"),
    ("postgresql://costguard:s3cr3t-pw@db:5432/costguard", "s3cr3t-pw"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "wJalrXUtnFEMI"),
    ('{"signing_secret": "8f742231b10e"}', "8f742231b10e"),
])
def test_secret_shapes_are_masked_even_when_nobody_registered_them(text: str,
                                                                  leaked: str) -> None:
    masked = redact(text)
    assert leaked not in masked and "***" in masked


def test_ordinary_text_is_left_alone() -> None:
    text = "stopped i-0abc (idle-gpu): sm_active 0% over 45 min; password policy ok"
    assert redact(text) == text


SELF_HOSTED_KEY = "Zq3X9kLm2PwT7vR1"  # a webhook of a self-hosted receiver: no Slack shape


def test_a_webhook_that_echoes_its_path_in_a_404_leaks_nothing(printed: io.StringIO) -> None:
    # the receiver answers 404 with a body quoting the path it was asked for: the whole URL
    # never appears, only its path, which only the content-based net catches
    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        while (await receive()).get("more_body"):  # read the post whole before answering:
            pass  # a server that answers first may have its connection reset under it
        body = f"no hook at {scope['path']} (try /hooks/<team>/<key>)".encode()
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": body})

    from costguard.alerts.errors import DeliveryError
    from costguard.alerts.settings import AlertsSettings
    from costguard.config import Settings

    with serve(app, free_port()) as base:
        url = f"{base}/hooks/team-ml/{SELF_HOSTED_KEY}/notify"
        settings = SlackSettings(webhook_url=SecretStr(url), timeout_s=2)
        register_settings(Settings(alerts={"slack": settings.model_dump()}))
        sender = SlackSender(settings)
        with pytest.raises(DeliveryError) as failed:
            sender._send_webhook({"text": "t", "blocks": []})
    logging.getLogger("costguard.alerts.dispatch").warning("delivery failed: %s", failed.value)
    logging.getLogger("costguard.alerts.dispatch").debug("raw: %s", str(failed.value))
    text = printed.getvalue()
    assert "no hook at" in text  # the receiver's words are kept, its secret is not
    assert SELF_HOSTED_KEY not in text
    # what the outbox stores in alert_deliveries.last_error, and `alerts list` shows
    secrets = AlertsSettings(slack=settings).secrets()
    stored = redact(str(failed.value), secrets)
    assert SELF_HOSTED_KEY not in stored and "no hook at" in stored


def test_significant_parts_are_keys_not_words() -> None:
    from costguard.redact import significant_parts

    parts = significant_parts("https://relay.example/services/webhooks/T01ABCDEF9/"
                              "B02GHIJKL8/aaaabbbbccccddddeeee1?sig=0123456789ab")
    assert {"T01ABCDEF9", "B02GHIJKL8", "aaaabbbbccccddddeeee1", "0123456789ab"} <= set(parts)
    assert "services" not in parts and "webhooks" not in parts
    assert significant_parts("plain-token-value") == ["plain-token-value"]


def test_a_commands_log_lines_go_to_the_stderr_of_the_moment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's handler writes to whatever stderr is when a line is logged: a stream that
    stood in for it a while (a test runner's capture) and was closed since is not written
    to ("I/O operation on closed file"), and the line is still redacted."""
    from costguard.daemon.logs import RedactingFormatter, StderrHandler, TextFormatter

    stood_in = io.StringIO()
    monkeypatch.setattr("sys.stderr", stood_in)
    handler = StderrHandler()
    handler.setFormatter(RedactingFormatter(TextFormatter()))
    log = logging.getLogger("costguard.test.stderr")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("first")
        now = io.StringIO()
        monkeypatch.setattr("sys.stderr", now)
        stood_in.close()
        log.warning("then %s", BOT)
    finally:
        log.removeHandler(handler)
    assert "then" in now.getvalue() and BOT not in now.getvalue()
