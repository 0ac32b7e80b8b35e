"""`costguard demo` (registered in cli.py): the daemon's cycles over a simulated fleet, into a
database of the demo's own."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from costguard.cli_common import ConfigOpt, cli_clock, err
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.errors import CostguardError, PolicyError, StoreUnopenable
from costguard.plain_lines import stdout_console

console = stdout_console()


def demo_command(
    config: ConfigOpt = None,
    hours: Annotated[int | None, typer.Option(
        help="Simulated hours (default 48 on the simulated cloud, 6 on aws/gcp).",
        min=1, max=24 * 14)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the summary.")] = False,
    cloud: Annotated[Literal["sim", "aws", "gcp"], typer.Option(
        help="sim: the in-memory fleet. aws: the real AWS adapter against an in-process moto "
        "fleet. gcp: the real GCP adapter against local fake Compute/Monitoring servers.")
    ] = "sim",
) -> None:
    """Watch costguard govern a simulated GPU fleet for 48 hours, in seconds.

    Writes into a database of its own, ./costguard-demo.db (or the one `costguard --database`
    names), emptied first; never the configured one. The same seed gives the same story.

    Example: costguard demo && costguard --database costguard-demo.db report --by team
    """
    from costguard.cli_common import database_override, database_url
    from costguard.demo.run import DEMO_DATABASE, demo_clock, run_demo

    settings = _settings(config)
    if database_override() is None:  # never the configured store: simulated spend is not
        settings = settings.model_copy(update={"database_url": database_url(DEMO_DATABASE)})
    try:
        if cloud == "sim":
            run_demo(settings, console, hours=hours or 48, verbose=not quiet,
                     clock=demo_clock(cli_clock().now(), hours or 48))
        else:
            from costguard.demo.clouds import DEFAULT_CLOUD_HOURS, cloud_providers

            span = hours or DEFAULT_CLOUD_HOURS
            clock = demo_clock(cli_clock().now(), span)
            with cloud_providers(cloud, clock, hours=span) as providers:
                run_demo(settings, console, hours=span, providers=providers, clock=clock,
                         verbose=not quiet)
    except PolicyError as exc:
        for e in exc.errors:
            err.print(str(e), highlight=False, markup=False)
        raise typer.Exit(2) from None
    except StoreUnopenable as exc:  # the demo's own database, not the configured one
        where = database_override() or f"./{DEMO_DATABASE}"
        raise _fail(f"the demo's database {where} cannot be opened or written ({exc.why}): run "
                    "the demo in a directory you can write, or name another with "
                    "`costguard --database PATH demo`") from None
    except CostguardError as exc:
        raise _fail(exc) from None
