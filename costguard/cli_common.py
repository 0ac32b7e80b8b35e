"""Helpers every `costguard` command module shares: load the settings, report an error.

One implementation, so each sub-command prints errors the same way (`error: MESSAGE` on
stderr, exit status 2 unless told otherwise) and none lets a traceback through. Commands
read the time from `cli_clock()`, so a test can run one at any date (a ManualClock).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

from costguard.clock import Clock, SystemClock
from costguard.errors import CostguardError

if TYPE_CHECKING:  # costguard.config loads every provider's settings (boto3): not for `fail`
    from costguard.config import Settings

err = Console(stderr=True)

# The clock commands read "now" from (never datetime.now); tests put a ManualClock here.
CLOCK: Clock = SystemClock()

# `costguard --database URL|PATH ...`: the store every command uses instead of the configured
# one (set by the top-level option, None when not given).
DATABASE: str | None = None


def database_url(value: str) -> str:
    """A `--database` value as a SQLAlchemy URL: a URL as given, a path as a SQLite file."""
    return value if "://" in value else f"sqlite:///{value}"


def cli_clock() -> Clock:
    """The clock a command reads the time from: the wall clock unless a test set `CLOCK`."""
    return CLOCK


def fail(message: object, code: int = 2) -> typer.Exit:
    """Print `error: MESSAGE` on stderr and return the Exit to raise (`raise fail(exc)`).

    The message is printed as given: brackets in it are text, never rich markup, and a
    long message is not broken across lines.
    """
    err.print(f"[red]error:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def load_settings_or_exit(config: Path | None) -> Settings:
    """The settings from CONFIG (or the defaults); a bad config file exits with status 2."""
    from costguard.config import load_settings
    from costguard.redact import register_settings

    try:
        settings = load_settings(config)
    except CostguardError as exc:
        raise fail(exc) from None
    if DATABASE is not None:
        settings = settings.model_copy(update={"database_url": DATABASE})
    register_settings(settings)  # masked in every log line from here on
    return settings
