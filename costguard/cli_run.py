"""`costguard run` (registered in cli.py): the daemon, or one cycle with `--once`."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from costguard.cli_common import ConfigOpt, cli_clock, err, load_policies_or_exit
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.errors import CostguardError, SourceError
from costguard.plain_lines import stdout_console

if TYPE_CHECKING:
    from costguard.config import Settings

console = stdout_console()


def run_command(
    config: ConfigOpt = None,
    once: Annotated[bool, typer.Option("--once", help="Run one cycle and exit.")] = False,
    fmt: Annotated[Literal["text", "json"], typer.Option(
        "--format", help="With --once: text or a JSON cycle summary.")] = "text",
) -> None:
    """Run the governance daemon (or one cycle with --once).

    Example: costguard run --once --format json
    """
    from costguard.engine import Engine
    from costguard.providers.registry import build_providers
    from costguard.store.db import Database

    settings = _settings(config)
    json_logs = once and _log_as_the_daemon_if_json(settings)
    clock = cli_clock()
    warnings: list[SourceError] = []
    policies = load_policies_or_exit(
        settings.policy_paths, warnings=warnings,
        identity_required=settings.http.identity.required)
    try:
        db = Database(settings.database_url)
        providers = build_providers(settings, clock)
    except CostguardError as exc:
        raise _fail(exc) from None
    for w in warnings:
        logging.getLogger("costguard.policy").warning("%s", w)
    engine = Engine(settings, db, providers, policies, clock)
    if once:
        try:
            summary = engine.run_cycle()
        except KeyboardInterrupt:
            err.print("interrupted: the cycle stopped and is marked interrupted (costguard "
                      "status counts it); every action taken is journaled, and the next "
                      "cycle starts from the fleet as it is", highlight=False)
            db.dispose()
            raise typer.Exit(130) from None
        if json_logs:
            from costguard.engine.summary import log_stages

            log_stages(summary, logging.getLogger("costguard.daemon"))
        if fmt == "json":
            print(json.dumps(summary.as_dict(), indent=2, default=str))
        else:
            for line in summary.lines():  # a line each, whole: a terminal wraps it, a log keeps it
                console.print(line, highlight=False, markup=False, soft_wrap=True)
        return
    from costguard.daemon.scheduler import run_forever

    try:
        run_forever(engine, settings)
    except CostguardError as exc:  # e.g. the port is taken: one line, no traceback
        raise _fail(exc) from None


def _log_as_the_daemon_if_json(settings: Settings) -> bool:
    """`run --once` logs as the daemon would where its logs are JSON
    (`COSTGUARD_LOG_FORMAT`, `daemon.log_format`): a CronJob's one-shot cycles feed the same
    log pipeline, stage lines included; True then. Text logs stay the CLI's (warnings and
    errors)."""
    from costguard.config import daemon_settings
    from costguard.daemon.logs import configure_daemon_logging

    try:
        cfg = daemon_settings(settings)
    except CostguardError as exc:
        raise _fail(exc) from None
    if cfg.log_format != "json":
        return False
    configure_daemon_logging(settings, cfg)
    return True
