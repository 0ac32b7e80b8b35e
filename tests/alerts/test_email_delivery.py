"""Email delivery to a real SMTP server (aiosmtpd) on 127.0.0.1, STARTTLS or TLS, with AUTH."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from email.message import Message
from pathlib import Path

import pytest

from costguard.alerts.dispatcher import Dispatcher
from costguard.alerts.email import message_id
from costguard.store.db import Database
from tests.alerts.fakes import Mailbox, self_signed_cert, smtp_server
from tests.alerts.helpers import T0, alerts, deliveries, idle_warning, smtp
from tests.fakes.loopback import free_port


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.dispose()


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


def _parts(msg: Message) -> tuple[str, str]:
    text = html = ""
    for part in msg.walk():
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        if part.get_content_type() == "text/plain":
            text = payload.decode()
        elif part.get_content_type() == "text/html":
            html = payload.decode()
    return text, html


def test_idle_warning_email_over_starttls_carries_the_facts_and_the_snooze_command(
        db: Database, cert: tuple[Path, Path]) -> None:
    box = Mailbox()
    with smtp_server(box, cert, free_port()) as port:
        idle_warning(db, recipients=("email:ana@example.com",))
        stats = Dispatcher(db, smtp(port, cert[0])).run(T0)
    assert stats.sent == 1
    assert box.logins == ["costguard"]
    assert box.envelopes == [("costguard@example.com", ["ana@example.com"])]
    msg = box.received[0]
    assert msg["Subject"].startswith("[costguard] trainer-0 (i-0abc000000000000)")
    assert msg.get_content_type() == "multipart/alternative"
    text, html = _parts(msg)
    for body in (text, html):
        for expected in ("i-0abc000000000000", "research", "all 8 GPUs idle for 1h",
                         "$98.32/h", "2026-03-02 14:15 UTC", "sm_active p95 0.4%",
                         "costguard snooze i-0abc000000000000 --for 4h", "ends after 1d"):
            assert expected in body, expected
    assert "http" not in text  # email readers snooze from a shell, not a link
    row = deliveries(db)[0]
    assert row.status == "sent" and row.external_id == msg["Message-ID"]
    assert row.external_id == message_id(row.dedupe_key, "costguard@example.com")


# aiosmtpd warns that AUTH does not require STARTTLS; here the whole connection is TLS
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_implicit_tls_works_too(db: Database, cert: tuple[Path, Path]) -> None:
    box = Mailbox()
    with smtp_server(box, cert, free_port(), implicit_tls=True) as port:
        idle_warning(db, recipients=("email:ana@example.com",))
        stats = Dispatcher(db, smtp(port, cert[0], implicit_tls=True)).run(T0)
    assert stats.sent == 1 and len(box.received) == 1


def test_untrusted_certificate_is_refused_and_retried(
        db: Database, cert: tuple[Path, Path], tmp_path: Path) -> None:
    other, _ = self_signed_cert(tmp_path)  # a CA that did not sign the server's certificate
    box = Mailbox()
    with smtp_server(box, cert, free_port()) as port:
        idle_warning(db, recipients=("email:ana@example.com",))
        stats = Dispatcher(db, smtp(port, other)).run(T0)
    assert stats.sent == 0 and stats.retrying == 1 and box.received == []
    assert "certificate" in (deliveries(db)[0].last_error or "").lower()


def test_mail_server_down_then_up_delivers_each_message_once(
        db: Database, cert: tuple[Path, Path]) -> None:
    box, port = Mailbox(), free_port()
    idle_warning(db, 3, recipients=("email:ana@example.com", "email:bo@example.com"))
    settings = smtp(port, cert[0])
    assert Dispatcher(db, settings).run(T0).retrying == 6  # nothing listening
    with smtp_server(box, cert, port):
        box.refuse_next = ["451 4.3.0 try again later"]
        first = Dispatcher(db, settings).run(T0 + timedelta(seconds=30))
        assert first.sent == 5 and first.retrying == 1
        assert Dispatcher(db, settings).run(T0 + timedelta(minutes=2)).sent == 1
        assert Dispatcher(db, settings).run(T0 + timedelta(hours=2)).sent == 0
    ids = [m["Message-ID"] for m in box.received]
    assert len(ids) == 6 and len(set(ids)) == 6
    assert all(a.status == "sent" for a in alerts(db))


def test_rejected_address_fails_without_retrying(db: Database, cert: tuple[Path, Path]) -> None:
    box = Mailbox(refuse_next=["550 5.1.1 no such user"])
    with smtp_server(box, cert, free_port()) as port:
        idle_warning(db, recipients=("email:nobody@example.com",))
        stats = Dispatcher(db, smtp(port, cert[0])).run(T0)
    assert stats.failed == 1
    assert deliveries(db)[0].status == "failed"
    assert "550" in (alerts(db)[0].last_error or "")


def _crash_at(where: str) -> Callable[[str], None]:
    def crash(point: str) -> None:
        if point == where:
            raise SystemExit(f"killed at {where}")
    return crash


def test_crash_before_the_smtp_session_resends_exactly_once(
        db: Database, cert: tuple[Path, Path]) -> None:
    box = Mailbox()
    with smtp_server(box, cert, free_port()) as port:
        idle_warning(db, recipients=("email:ana@example.com",))
        with pytest.raises(SystemExit):
            Dispatcher(db, smtp(port, cert[0]), fault=_crash_at("before-send")).run(T0)
        assert box.received == []
        row = deliveries(db)[0]
        assert row.status == "sending" and row.external_id is None  # never reached SMTP
        # a claim younger than claim_timeout may still be in flight: left alone
        assert Dispatcher(db, smtp(port, cert[0])).run(T0 + timedelta(minutes=1)).sent == 0
        stats = Dispatcher(db, smtp(port, cert[0])).run(T0 + timedelta(minutes=10))
        assert stats.recovered == 1 and stats.sent == 1
        Dispatcher(db, smtp(port, cert[0])).run(T0 + timedelta(hours=3))
    assert len(box.received) == 1
    row = deliveries(db)[0]
    assert row.status == "sent" and row.external_id == box.received[0]["Message-ID"]


def test_crash_after_the_message_went_out_resends_it_with_the_same_message_id(
        db: Database, cert: tuple[Path, Path]) -> None:
    box = Mailbox()
    with smtp_server(box, cert, free_port()) as port:
        idle_warning(db, recipients=("email:ana@example.com",))
        with pytest.raises(SystemExit):
            Dispatcher(db, smtp(port, cert[0]), fault=_crash_at("after-send")).run(T0)
        assert len(box.received) == 1
        # the mark written when the SMTP transaction began: it may have arrived
        expected = message_id(deliveries(db)[0].dedupe_key, "costguard@example.com")
        assert deliveries(db)[0].external_id == expected
        stats = Dispatcher(db, smtp(port, cert[0])).run(T0 + timedelta(minutes=10))
        assert stats.recovered == 1 and stats.sent == 1
        assert Dispatcher(db, smtp(port, cert[0])).run(T0 + timedelta(hours=3)).sent == 0
    # two copies on the wire, one message to a client that knows the Message-ID
    assert [m["Message-ID"] for m in box.received] == [expected, expected]
    assert box.received[0]["Date"] == box.received[1]["Date"]
    row = deliveries(db)[0]
    assert row.status == "sent" and row.external_id == expected
    assert alerts(db)[0].status == "sent"


def test_with_resend_interrupted_off_an_interrupted_email_is_unconfirmed_not_repeated(
        db: Database, cert: tuple[Path, Path]) -> None:
    box = Mailbox()
    with smtp_server(box, cert, free_port()) as port:
        settings = smtp(port, cert[0])
        assert settings.email is not None
        settings.email.resend_interrupted = False
        idle_warning(db, recipients=("email:ana@example.com",))
        with pytest.raises(SystemExit):
            Dispatcher(db, settings, fault=_crash_at("after-send")).run(T0)
        stats = Dispatcher(db, settings).run(T0 + timedelta(minutes=10))
        assert stats.recovered == 1 and stats.sent == 0
        Dispatcher(db, settings).run(T0 + timedelta(hours=3))
    assert len(box.received) == 1
    row = deliveries(db)[0]
    assert row.status == "unconfirmed"
    assert row.external_id == box.received[0]["Message-ID"]
    assert "costguard alerts retry 1" in (row.last_error or "")


def _enqueue_named(db: Database, name: str) -> None:
    from costguard.alerts.outbox import enqueue

    with db.session() as s:
        enqueue(s, dedupe_key=f"idle-gpu|aws|i-0nl|notify|{len(name)}", kind="idle-warning",
                severity="warning", now=T0, recipients=["email:ana@example.com"],
                policy="idle-gpu", provider="aws", instance_id="i-0nl", team="research",
                owner=None, subject=f"{name} (i-0nl) will be stopped at 14:15 UTC",
                body="Why: idle", context={})


def test_a_line_break_in_an_instance_s_name_stays_out_of_the_headers(
        db: Database, cert: tuple[Path, Path]) -> None:
    # an EC2 Name tag may hold any character: a line break in the subject stopped the whole
    # dispatch (the email library refuses it), so no email went out, this one or any after
    _enqueue_named(db, "trainer\r\nBcc: eve@example.com\u2028x")
    idle_warning(db, recipients=("email:ana@example.com",))
    box = Mailbox()
    with smtp_server(box, cert, free_port()) as port:
        stats = Dispatcher(db, smtp(port, cert[0])).run(T0)
    assert stats.sent == 2
    assert [env[1] for env in box.envelopes] == [["ana@example.com"], ["ana@example.com"]]
    first = box.received[0]
    # one line (SMTP folds a long header over several, each continued by a space)
    assert " ".join(str(first["Subject"]).split()) == (
        "[costguard] trainer Bcc: eve@example.com x (i-0nl) will be stopped at 14:15 UTC")
    assert first["Bcc"] is None
    assert all(d.status == "sent" for d in deliveries(db))


def test_a_message_that_cannot_be_made_fails_alone(
        db: Database, cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    # whatever goes wrong building one message (a bug), the others still go out, and the
    # one is retried like any failed delivery, with the error kept
    import costguard.alerts.email as email

    real = email.build_email

    def fragile(**kw: object) -> object:
        if "(i-0nl)" in str(kw["subject"]):
            raise RuntimeError("template broke")
        return real(**kw)  # type: ignore[arg-type]

    monkeypatch.setattr(email, "build_email", fragile)
    _enqueue_named(db, "trainer")
    idle_warning(db, recipients=("email:ana@example.com",))
    box = Mailbox()
    with smtp_server(box, cert, free_port()) as port:
        stats = Dispatcher(db, smtp(port, cert[0])).run(T0)
    assert stats.sent == 1 and len(box.received) == 1
    broken = [d for d in deliveries(db) if d.status != "sent"]
    assert len(broken) == 1 and broken[0].status == "pending"  # tried again later
    assert broken[0].last_error == "could not be made: RuntimeError: template broke"
