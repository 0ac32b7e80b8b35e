"""Structured logs for the daemon: text for people, JSON lines for log pipelines.

Secrets (the agent token, the Slack signing secret, database passwords) are registered with
`configure_logging` and masked in every formatted line, tracebacks included, so a message
that quotes a header or a URL never leaks one.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TextIO

from costguard.daemon.settings import LogFormat

MASK = "***"
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


class TextFormatter(logging.Formatter):
    """`time level logger: message key=value ...`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = fields_of(record)
        if extra:
            line += " " + " ".join(f"{k}={v}" for k, v in extra.items())
        return line


class RedactingFormatter(logging.Formatter):
    """Wraps another formatter and masks every registered secret in its output."""

    def __init__(self, inner: logging.Formatter, secrets: Iterable[str]) -> None:
        super().__init__()
        self.inner = inner
        # longest first, so a secret containing another is masked whole
        self.secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        line = self.inner.format(record)
        for secret in self.secrets:
            line = line.replace(secret, MASK)
        return line


def configure_logging(
    fmt: LogFormat = "text", level: str = "INFO", *, secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Route every `costguard.*` (and uvicorn) record to one handler on stderr."""
    handler = logging.StreamHandler(stream or sys.stderr)
    inner: logging.Formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    handler.setFormatter(RedactingFormatter(inner, secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # uvicorn logs each request at INFO: noise in a daemon scraped every few seconds
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    return handler
