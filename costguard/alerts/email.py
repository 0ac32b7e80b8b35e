"""Email: multipart (plain text + HTML) messages from Jinja2 templates, sent over SMTP.

The Message-ID is derived from the delivery's dedupe key, so the same event to the same
address always carries the same id, whatever happens to the process in between.
"""

from __future__ import annotations

import hashlib
import re
import smtplib
import ssl
from collections.abc import Callable, Sequence
from email.message import EmailMessage
from email.utils import format_datetime
from functools import cache
from typing import TYPE_CHECKING

from costguard.alerts.content import AlertView
from costguard.alerts.errors import DeliveryError
from costguard.alerts.settings import EmailSettings, redact

if TYPE_CHECKING:
    from jinja2 import Environment


_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


@cache
def _env() -> Environment:
    """The templates' environment, made on first use: Jinja2 is imported when an email is
    rendered, not by every cycle that imports the alert channels."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    return Environment(
        loader=PackageLoader("costguard.alerts", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )


def message_id(dedupe_key: str, from_addr: str) -> str:
    domain = from_addr.rsplit("@", 1)[-1]
    return f"<{hashlib.sha256(dedupe_key.encode()).hexdigest()[:40]}@{domain}>"


def render_alert(view: AlertView, max_snooze_text: str) -> tuple[str, str]:
    """(plain text, HTML) for one alert."""
    args = {"v": view, "max_snooze": max_snooze_text}
    return (_env().get_template("alert.txt.j2").render(**args),
            _env().get_template("alert.html.j2").render(**args))


def render_digest(title: str, views: Sequence[AlertView]) -> tuple[str, str]:
    args = {"title": title, "views": list(views)}
    return (_env().get_template("digest.txt.j2").render(**args),
            _env().get_template("digest.html.j2").render(**args))


def build_email(*, subject: str, text: str, html: str, to: str, from_addr: str,
                dedupe_key: str, date_header: str | None = None) -> EmailMessage:
    msg = EmailMessage()
    # one line: a subject names an instance, and an EC2 Name tag may hold a line break, which
    # a header must not (the email library refuses it; a raw one would start a new header)
    msg["Subject"] = " ".join(_CONTROL.sub(" ", subject).split())
    msg["From"] = from_addr
    msg["To"] = to
    msg["Message-ID"] = message_id(dedupe_key, from_addr)
    if date_header:
        msg["Date"] = date_header
    msg["X-Costguard-Dedupe-Key"] = hashlib.sha256(dedupe_key.encode()).hexdigest()
    msg.set_content(text)
    msg.add_alternative(html, subtype="html")
    return msg


def alert_email(view: AlertView, *, to: str, from_addr: str, dedupe_key: str,
                max_snooze: str) -> EmailMessage:
    text, html = render_alert(view, max_snooze)
    return build_email(subject=f"[costguard] {view.subject}", text=text, html=html, to=to,
                       from_addr=from_addr, dedupe_key=dedupe_key,
                       date_header=format_datetime(view.created_at))


class EmailSender:
    """Sends one message over SMTP (STARTTLS, implicit TLS or plain) with optional auth."""

    def __init__(self, settings: EmailSettings, secrets: Sequence[str] = ()) -> None:
        self.settings = settings
        self._password = settings.secret_password()
        self._secrets = list(secrets)

    def _tls(self) -> ssl.SSLContext:
        ca = str(self.settings.ca_file) if self.settings.ca_file else None
        return ssl.create_default_context(cafile=ca)

    def send(self, msg: EmailMessage,
             on_transaction: Callable[[str], None] | None = None) -> str:
        """Send; returns the Message-ID. `on_transaction(message_id)` runs once the session
        is up (connected, TLS, logged in), just before MAIL FROM: a failure before it means
        the message cannot have arrived."""
        s = self.settings
        try:
            smtp: smtplib.SMTP
            if s.tls:
                smtp = smtplib.SMTP_SSL(s.host, s.port, timeout=s.timeout_s,
                                        context=self._tls())
            else:
                smtp = smtplib.SMTP(s.host, s.port, timeout=s.timeout_s)
            with smtp:
                if s.starttls:
                    smtp.starttls(context=self._tls())
                if s.username:
                    password = self._password.get_secret_value() if self._password else ""
                    smtp.login(s.username, password)
                if on_transaction is not None:
                    on_transaction(str(msg["Message-ID"]))
                smtp.send_message(msg)
        except smtplib.SMTPRecipientsRefused as exc:
            raise DeliveryError(self._clean(f"SMTP refused the recipient: {exc.recipients}"),
                                permanent=True) from None
        except smtplib.SMTPAuthenticationError as exc:
            # a wrong password is fixed by an operator; keep retrying until then
            raise DeliveryError(f"SMTP authentication failed ({exc.smtp_code}); check "
                                "alerts.email.username and password") from None
        except smtplib.SMTPResponseException as exc:
            permanent = 500 <= exc.smtp_code < 600
            raise DeliveryError(self._clean(f"SMTP error {exc.smtp_code}: {exc.smtp_error!r}"),
                                permanent=permanent) from None
        except (smtplib.SMTPException, OSError) as exc:
            where = f"{s.host}:{s.port}"
            raise DeliveryError(self._clean(f"SMTP delivery via {where} failed: {exc}")) from None
        return str(msg["Message-ID"])

    def _clean(self, text: str) -> str:
        return redact(text, self._secrets)
