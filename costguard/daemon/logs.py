"""Structured logs for the daemon: text for people, JSON lines for log pipelines.

Secrets (the agent token, the Slack signing secret, database passwords) are registered with
`configure_logging` and masked in every formatted line, tracebacks included, so a message
that quotes a header or a URL never leaks one; so is anything shaped like a secret
(costguard.redact). Third-party loggers propagate here and have no handler of their own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from costguard.controls import TERMINAL_CONTROLS
from costguard.redact import redact

if TYPE_CHECKING:
    from costguard.config import Settings
    from costguard.daemon.settings import DaemonSettings, LogFormat

# attributes every LogRecord has; anything else came in through `extra=` and is a field
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName",
                                                     "color_message"}


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(fields_of(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


# a message quotes what others wrote (a tag, an instance's name, an API's error text): a
# control character in it is written as an escape, and each line it breaks into is indented,
# so it can neither send a terminal a command nor forge a record of its own
_CONTROL = TERMINAL_CONTROLS
_CONTINUED = "\n    "


def _escaped(char: re.Match[str]) -> str:
    return f"\\x{ord(char.group()):02x}"


class TextFormatter(logging.Formatter):
    """`time level logger: message key=value ...`; a field the message already shows as
    `key=value` is not repeated."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = record.message
        if "\n" in message or _CONTROL.search(message):
            record.message = _CONTROL.sub(_escaped, message).replace("\n", _CONTINUED)
        try:
            return super().formatMessage(record)
        finally:
            record.message = message

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        said = set(record.getMessage().split())  # whole words: `n=1` is not in `n=12`
        pairs = [f"{k}={_text(v)}" for k, v in fields_of(record).items()]
        shown = [p for p in pairs if p not in said]
        return line + (" " + " ".join(shown) if shown else "")


def _text(value: Any) -> str:
    """A field's value in a text line: one token (quoted when it holds spaces)."""
    text = str(value)
    quoted = not text or _CONTROL.search(text) or any(c.isspace() or c == '"' for c in text)
    return json.dumps(text) if quoted else text


class RedactingFormatter(logging.Formatter):
    """Wraps another formatter and masks every secret in its output: those given here,
    those registered process-wide, and anything shaped like one (costguard.redact)."""

    def __init__(self, inner: logging.Formatter, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.inner = inner
        self.secrets = [s for s in secrets if len(s) >= 4]

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record), self.secrets)


# libraries whose records must reach costguard's handler (format, redaction) and never a
# handler of their own; chatty ones are held at WARNING (their DEBUG lines quote URLs)
THIRD_PARTY = ("slack_sdk", "urllib3", "botocore", "boto3", "google", "google.auth",
               "google.api_core", "httpx", "httpcore", "uvicorn", "uvicorn.error",
               "uvicorn.access", "apscheduler", "alembic", "sqlalchemy", "requests")
_QUIET = ("uvicorn.access", "apscheduler", "slack_sdk", "urllib3", "botocore", "boto3",
          "httpx", "httpcore", "google.auth", "requests")


def route_third_party(level: str | int) -> None:
    """Every third-party logger propagates to the root handler with no handler of its own
    (slack_sdk's, if a client was given one, included): one format, one redaction."""
    for name in THIRD_PARTY:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    floor = max(logging.WARNING, logging.getLevelName(level) if isinstance(level, str)
                else level)
    for name in _QUIET:
        logging.getLogger(name).setLevel(floor)


def _raised_at(exc: BaseException | None) -> str:
    """An exception's kind and the line that raised it ("" for none)."""
    if exc is None:
        return ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""
    return f"{type(exc).__qualname__}@{where}"


class Throttle(logging.Filter):
    """The first record of a message (as formatted: the same words with other values are
    another message), then at most one every `interval_s`, saying how many like it were
    left out. asyncio logs every accept the kernel refuses ("socket.accept() out of
    system resource", with its traceback): out of file descriptors, that was 115 MB of log
    in half a minute."""

    MAX_KEYS = 1_000  # distinct messages remembered (then forgotten all at once)

    def __init__(self, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, *,
                 per_template: bool = False) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        # per_template: one key per format string and, for an exception, its kind and the
        # line that raised it, whatever the values (a value a stranger chooses, such as the
        # `error` of a login callback or the path of a request, would make each line its own)
        self.per_template = per_template
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._left_out: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a library's call whose arguments do not fit: the handler says so
            return True
        exc = record.exc_info[1] if record.exc_info else None
        # uvicorn's "Exception in ASGI application" is one message for every error: each
        # error its own, and the same one again held back
        key = (f"{record.name}:{record.levelno}:{record.msg}:{_raised_at(exc)}"
               if self.per_template else f"{record.name}:{record.levelno}:{message}:{exc!r}")
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._left_out[key] = self._left_out.get(key, 0) + 1
                return False
            if len(self._last) >= self.MAX_KEYS:
                self._last.clear()
                self._left_out.clear()
            self._last[key] = now
            left_out = self._left_out.pop(key, 0)
        if left_out:
            record.msg = (f"{message} ({left_out:,} more like it in the last "
                          f"{self.interval_s:g} s, left out)")
            record.args = None
        return True


# libraries that log a record for each event a client or the system can repeat at will, held
# to one a minute per message: asyncio's refused accepts, uvicorn's "Invalid HTTP request
# received." for each malformed request, python-multipart's for each malformed form body
# (a logger's filters see only what is logged to it by name, not to its children)
_THROTTLED = ("asyncio", "uvicorn.error", "python_multipart.multipart")
# costguard's own records of what anyone who reaches the daemon can repeat at will: a
# console login refused (a callback with a made-up error, a login while the identity
# provider is down), and a request that failed inside (with its traceback: one request
# after another, each path its own, was a traceback each); one a minute per message
# template and, for a failure, per line that raised it, whatever the values in it
REFUSALS = "costguard.console.refused"
UNEXPECTED = "costguard.http.unexpected"
_PER_TEMPLATE = (REFUSALS, UNEXPECTED)


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on whatever `sys.stderr` is when a record is written, as Python's own
    last-resort handler is: a command's handler outlives a stream swapped in for a while (a
    test runner's capture, click's CliRunner) and closed after, and a record logged then by a
    thread still running would have met a closed file."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:  # StreamHandler sets it; it is always stderr
        pass


def install(handler: logging.Handler, level: str | int) -> None:
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    route_third_party(level)
    for name in _THROTTLED:
        logger = logging.getLogger(name)
        if not any(isinstance(f, Throttle) for f in logger.filters):
            logger.addFilter(Throttle())
    for name in _PER_TEMPLATE:
        logger = logging.getLogger(name)
        if not any(isinstance(f, Throttle) for f in logger.filters):
            logger.addFilter(Throttle(per_template=True))
    # a library's warning (`warnings.warn`) is a log record too (logger `py.warnings`), in the
    # handler's format and redacted: printed by `warnings` on stderr, it broke a JSON log's
    # every-line-is-JSON and passed by the redaction
    logging.captureWarnings(True)


def configure_logging(
    fmt: LogFormat = "text", level: str = "INFO", *, secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Route every record, costguard's and every library's, to one redacting handler on
    stderr (uvicorn's per-request lines and the libraries' DEBUG chatter held at WARNING)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    inner: logging.Formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    handler.setFormatter(RedactingFormatter(inner, secrets))
    install(handler, level)
    return handler


def configure_daemon_logging(settings: Settings, cfg: DaemonSettings) -> logging.Handler:
    """The daemon's logs (`costguard run`, and `run --once` when they are JSON): its format
    and level, every secret of the settings masked, and the agent token of the environment
    (`COSTGUARD_AGENT_TOKEN`)."""
    from costguard.redact import secrets_of

    env_token = os.environ.get("COSTGUARD_AGENT_TOKEN")
    return configure_logging(cfg.log_format, cfg.log_level,
                             secrets=secrets_of(settings) + secrets_of(cfg)
                             + ([env_token] if env_token else []))
