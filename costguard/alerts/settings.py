"""`alerts` in costguard.yaml: channels, routing, retries, throttling and digests.

Example::

    alerts:
      console: true
      routing_file: alerts/routes.yaml
      slack:
        bot_token_file: /run/secrets/slack-bot-token     # or COSTGUARD_ALERTS__SLACK__BOT_TOKEN
        signing_secret_file: /run/secrets/slack-signing-secret
        default_channel: "#finops"
      email:
        host: smtp.example.com
        port: 587
        starttls: true
        username: costguard
        password_file: /run/secrets/smtp-password
        from_addr: costguard@example.com
      max_attempts: 8
      backoff: {initial: 30s, max: 1h}
      throttle: {per_recipient: 30, window: 1h}
      digest: {hour_utc: 9}

Every secret (`webhook_url`, `bot_token`, `signing_secret`, `password`) may be given inline,
through the environment (`COSTGUARD_ALERTS__SLACK__BOT_TOKEN=...`), or as a `*_file` naming a
file that holds it. Secrets are `SecretStr`: they print as `**********`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from costguard.errors import ConfigError
from costguard.policy.base import Duration
from costguard.small_files import SECRET_BYTES, read_small_text


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _secret(inline: SecretStr | None, file: Path | None, key: str) -> SecretStr | None:
    if inline is not None and inline.get_secret_value():
        return inline
    if file is None:
        return None
    try:
        text = read_small_text(file, SECRET_BYTES).strip()
    except OSError as exc:
        raise ConfigError(f"alerts: cannot read {key}_file {file}: {exc.strerror}; "
                          f"check the path and its permissions") from None
    except UnicodeDecodeError:
        raise ConfigError(f"alerts: {key}_file {file} is not UTF-8 text") from None
    if not text:
        raise ConfigError(f"alerts: {key}_file {file} is empty; put the secret in it")
    return SecretStr(text)


def _one_of(section: str, key: str, inline: SecretStr | None, file: Path | None) -> None:
    if inline is not None and inline.get_secret_value() and file is not None:
        raise ValueError(f"{section}: give {key} or {key}_file, not both")


class SlackSettings(_Section):
    """Slack: a bot token (Web API: any channel or user, replies, dedupe on restart) or an
    incoming webhook (one fixed channel). `signing_secret` verifies button clicks."""

    webhook_url: SecretStr | None = None
    webhook_url_file: Path | None = None
    bot_token: SecretStr | None = None
    bot_token_file: Path | None = None
    signing_secret: SecretStr | None = None
    signing_secret_file: Path | None = None
    default_channel: str | None = Field(default=None, pattern=r"^[#@]?[\w.-]+$")
    api_base_url: str = "https://slack.com/api/"
    timeout_s: float = Field(default=10.0, gt=0, le=120)

    @model_validator(mode="after")
    def _exclusive(self) -> SlackSettings:
        for key in ("webhook_url", "bot_token", "signing_secret"):
            _one_of("alerts.slack", key, getattr(self, key), getattr(self, f"{key}_file"))
        return self

    def webhook(self) -> SecretStr | None:
        return _secret(self.webhook_url, self.webhook_url_file, "webhook_url")

    def token(self) -> SecretStr | None:
        return _secret(self.bot_token, self.bot_token_file, "bot_token")

    def signing(self) -> SecretStr | None:
        return _secret(self.signing_secret, self.signing_secret_file, "signing_secret")

    @property
    def configured(self) -> bool:
        return any(getattr(self, k) is not None for k in
                   ("webhook_url", "webhook_url_file", "bot_token", "bot_token_file"))


class EmailSettings(_Section):
    """SMTP. `starttls` upgrades a plain connection (port 587); `tls` connects over TLS from
    the start (port 465). Authentication is used when `username` is set."""

    host: str
    port: int = Field(default=587, ge=1, le=65535)
    starttls: bool = True
    tls: bool = False
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    from_addr: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    timeout_s: float = Field(default=30.0, gt=0, le=300)
    # a CA bundle for a private SMTP relay; the system store otherwise
    ca_file: Path | None = None
    # a send interrupted after the message transaction began may or may not have arrived:
    # true sends it again with the same Message-ID (clients that know the id collapse the
    # copy); false marks it `unconfirmed` for `costguard alerts retry`
    resend_interrupted: bool = True

    @model_validator(mode="after")
    def _exclusive(self) -> EmailSettings:
        if self.tls and self.starttls:
            raise ValueError("alerts.email: `tls` (implicit TLS, port 465) and `starttls` "
                             "(port 587) exclude each other; set one to false")
        _one_of("alerts.email", "password", self.password, self.password_file)
        return self

    def secret_password(self) -> SecretStr | None:
        return _secret(self.password, self.password_file, "password")


class BackoffSettings(_Section):
    """Retry delays: `initial`, doubling per failed attempt, at most `max`."""

    initial: Duration = timedelta(seconds=30)
    max: Duration = timedelta(hours=1)


class ThrottleSettings(_Section):
    """At most `per_recipient` messages to one recipient per `window`; later ones wait."""

    per_recipient: int = Field(default=30, ge=1)
    window: Duration = timedelta(hours=1)


class DigestSettings(_Section):
    """Routes with `digest: true` collect alerts into one message per recipient a day,
    sent at `hour_utc`."""

    hour_utc: int = Field(default=9, ge=0, le=23)


class AlertsSettings(_Section):
    console: bool = True
    slack: SlackSettings = Field(default_factory=SlackSettings)
    email: EmailSettings | None = None
    routing_file: Path | None = None
    max_attempts: int = Field(default=8, ge=1, le=100)
    backoff: BackoffSettings = Field(default_factory=BackoffSettings)
    throttle: ThrottleSettings = Field(default_factory=ThrottleSettings)
    digest: DigestSettings = Field(default_factory=DigestSettings)
    # longest snooze a button or command may set, whatever is asked for
    max_snooze: Duration = timedelta(hours=24)
    # a send claimed longer ago than this was interrupted by a crash
    claim_timeout: Duration = timedelta(minutes=5)

    def secrets(self) -> list[str]:
        """Every configured secret's value, for redaction of error texts."""
        found: list[SecretStr | None] = []
        for getter in (self.slack.webhook, self.slack.token, self.slack.signing):
            try:
                found.append(getter())
            except ConfigError:
                continue
        if self.email is not None:
            with contextlib.suppress(ConfigError):
                found.append(self.email.secret_password())
        return [s.get_secret_value() for s in found if s is not None]


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret replaced by `***` (errors from SDKs may quote URLs); see
    costguard.redact, which also masks anything shaped like a secret."""
    from costguard.redact import redact as masked

    return masked(text, secrets)
