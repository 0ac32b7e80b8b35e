"""Helpers every `costguard` command module shares: load the settings, report an error.

One implementation, so each sub-command prints errors the same way (`error: MESSAGE` on
stderr, exit status 2 unless told otherwise) and none lets a traceback through. Commands
read the time from `cli_clock()`, so a test can run one at any date (a ManualClock).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from costguard.clock import Clock, SystemClock
from costguard.errors import CostguardError
from costguard.plain_lines import ShownConsole

if TYPE_CHECKING:  # costguard.config loads every provider's settings (boto3): not for `fail`
    from costguard.config import Settings
    from costguard.errors import SourceError
    from costguard.policy.schema import PolicySet

err = ShownConsole(stderr=True)

# The clock commands read "now" from (never datetime.now); tests put a ManualClock here.
CLOCK: Clock = SystemClock()

# --config, as every command of the main CLI takes it
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="costguard.yaml to read (default: ./costguard.yaml "
                 "if present, or $COSTGUARD_CONFIG)."),
]

# `costguard --database URL|PATH ...`: the store this command uses instead of the configured
# one. The top-level callback sets it on every invocation (None when not given).
DATABASE: str | None = None


def database_override() -> str | None:
    """The store `costguard --database` named for this command (None: not given)."""
    return DATABASE


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
    override = database_override()
    if override is not None:
        settings = settings.model_copy(update={"database_url": override})
    register_settings(settings)  # masked in every log line from here on
    return settings


def load_policies_or_exit(
    paths: list[Path], *, configured: bool = True, warnings: list[SourceError] | None = None,
    identity_required: bool = True,
) -> PolicySet:
    """The policies at `paths`; every problem as FILE:LINE:COL on stderr and exit 2.

    `configured`: the paths came from the configuration (`policy_paths`), so a missing one
    is followed by where that is set and how to get example policies. Warnings about
    policies that load are appended to `warnings` when a list is given
    (`identity_required`: `http.identity.mode` is `required`).
    """
    from costguard.errors import PolicyError
    from costguard.policy.load import load_with_warnings

    try:
        policies, found = load_with_warnings(paths, identity_required=identity_required)
    except PolicyError as exc:
        for e in exc.errors:
            err.print(str(e), highlight=False, markup=False, soft_wrap=True)
        if configured and not all(p.exists() for p in paths):
            err.print(f"hint: policies are read from policy_paths in costguard.yaml or "
                      f"COSTGUARD_POLICY_PATHS (now: {', '.join(str(p) for p in paths)}); "
                      "`costguard init DIR` writes the example policies and a config that "
                      "names them.", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if warnings is not None:
        warnings.extend(found)
    return policies
