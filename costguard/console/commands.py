"""`costguard console`: the daemon's web pages and report API over a store, without the
daemon's cycles (no cloud is read, nothing acts on its own): to look at a demo's database,
a copy of production's, or a store another replica fills."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from costguard.cli_common import cli_clock, load_policies_or_exit
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.costs.commands import ConfigOpt
from costguard.errors import CostguardError
from costguard.plain_lines import stdout_console

console = stdout_console()


def console_command(
    config: ConfigOpt = None,
    port: Annotated[int | None, typer.Option(
        help="Port to listen on (default: http.port, 8787; 0: any free port).")] = None,
) -> None:
    """Serve the web console and the /api/v1 report API over the configured store, until
    Ctrl-C. It reads the store and runs no cycle; an admin's snooze or stop-now is
    journaled and acted on by the daemon's next cycle. Off loopback it needs console.auth
    (docs/console.md).

    Example: costguard --database costguard-demo.db console   (then open the printed URL)
    """
    from costguard.console.app import console_server
    from costguard.console.auth import is_loopback
    from costguard.demo.run import demo_policies
    from costguard.store.db import Database

    settings = _settings(config)
    host = settings.http.host
    cfg = settings.console
    if not cfg.enabled:
        raise _fail("console.enabled is false: nothing to serve")
    if cfg.auth == "none" and not is_loopback(host):
        raise _fail(
            f"http.host is {host} and console.auth is none: anyone who reaches the port "
            "would read every team's spend. Set console.auth to oidc or proxy "
            "(docs/console.md), or http.host to 127.0.0.1")
    try:
        db = Database(settings.database_url, create=False)
        with db.session() as s:
            # a demo's database: shown with the policies the demo ran, as `explain` does
            policies = demo_policies(s) or load_policies_or_exit(settings.policy_paths)
        server = console_server(settings, db, cli_clock(), lambda: policies, port=port)
    except CostguardError as exc:
        raise _fail(exc) from None
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    console.print(f"console: http://{shown}:{server.port}/console/  (store {db.safe_url}; "
                  "Ctrl-C ends)", highlight=False)
    try:
        while server.thread.is_alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        db.dispose()
