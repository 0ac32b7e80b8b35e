"""Secrets out of every printed line: the one place that masks them.

Two nets, both applied by `redact`:
- the secrets costguard knows: registered from the settings as soon as a command loads them
  (`register_settings`), or passed in by the caller (SDK error texts, alert delivery);
- the shapes a secret has even when nobody registered it (a mistyped webhook URL is still a
  webhook URL): Slack webhook URLs and tokens, `Authorization`/bearer values, passwords in
  URLs, AWS secret keys and session tokens written as `key=value`.

The log formatter (`costguard.daemon.logs.RedactingFormatter`) runs every line through it,
the lines of third-party libraries (slack_sdk, urllib3, botocore, google-auth, uvicorn)
included.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

MASK = "***"
_MIN_LEN = 4  # shorter "secrets" would mask ordinary words

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Slack incoming webhooks / workflow triggers: everything after the path's kind
    (re.compile(r"(hooks\.slack\.com/(?:services|workflows|triggers)/)[^\s'\"<>]+"),
     r"\1" + MASK),
    (re.compile(r"\bxox[abeoprs]-[A-Za-z0-9-]{8,}"), MASK),  # Slack tokens
    (re.compile(r"\bxapp-[A-Za-z0-9-]{8,}"), MASK),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + MASK),
    (re.compile(r"(?i)(['\"]?authorization['\"]?\s*[:=]\s*['\"]?)[^'\",}\s]+(?:\s+[^'\",}\s]+)?"),
     r"\1" + MASK),
    # scheme://user:password@host -> scheme://user:***@host
    (re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^@\s/]+(@)"), r"\1" + MASK + r"\2"),
    (re.compile(r"(?i)((?:aws_)?secret_access_key|session_token|signing_secret|password)"
                r"(['\"]?\s*[:=]\s*['\"]?)[^'\",}\s]+"), r"\1\2" + MASK),
)

_registered: set[str] = set()
_lock = threading.Lock()


def significant_parts(secret: str) -> list[str]:
    """The parts of a secret that give it away alone, masked wherever they appear: a server
    that echoes a webhook's path in its 404 body, or a library that logs the path without the
    host, quotes them and not the whole URL. For a URL: its password, each path segment and
    query value that looks like a key or token (8 characters or more with a digit, or 20 or
    more: never an ordinary word such as `services`); for a token, itself."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    parts = [secret]
    if "://" not in secret:
        return parts
    try:
        url = urlsplit(secret)
        pieces = [unquote(p) for p in url.path.split("/")]
        pieces += [v for _, v in parse_qsl(url.query)] + [url.password or ""]
    except ValueError:
        return parts
    for piece in pieces:
        if len(piece) >= 20 or (len(piece) >= 8 and any(c.isdigit() for c in piece)):
            parts.append(piece)
            if url.path:  # the path alone, as a library's log line quotes it
                parts.append(url.path)
    return parts


def _expanded(secrets: Iterable[str]) -> set[str]:
    return {p for s in secrets if s for p in significant_parts(s) if len(p) >= _MIN_LEN}


def register(secrets: Iterable[str]) -> None:
    """Mask these values, and their significant parts, in every line from now on
    (process-wide)."""
    with _lock:
        _registered.update(_expanded(secrets))


def registered() -> list[str]:
    with _lock:
        return sorted(_registered, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every known secret, and anything shaped like one, replaced by `***`."""
    # longest first, so a secret containing another is masked whole
    for secret in sorted({*registered(), *_expanded(secrets)}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def secrets_of(value: object) -> list[str]:
    """Every SecretStr value in a settings tree, and passwords in database URLs."""
    from pydantic import BaseModel, SecretStr

    found: list[str] = []
    if isinstance(value, SecretStr):
        found.append(value.get_secret_value())
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            found.extend(secrets_of(getattr(value, name)))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.extend(secrets_of(item))
    elif isinstance(value, dict):
        for item in value.values():
            found.extend(secrets_of(item))
    url = getattr(value, "database_url", None) if isinstance(value, BaseModel) else None
    if isinstance(url, str):
        found.extend(_url_password(url))
    return found


def _url_password(url: str) -> list[str]:
    from sqlalchemy.engine import make_url

    try:
        password = make_url(url).password
    except Exception:  # an unparsable URL fails later with its own message
        return []
    return [str(password)] if password else []


def register_settings(settings: object) -> None:
    """Register every secret of a loaded settings tree (SecretStr fields, DB passwords)."""
    register(secrets_of(settings))
