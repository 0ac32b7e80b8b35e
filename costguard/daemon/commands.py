"""`costguard status`, `costguard db backup`, `costguard db compact` and `costguard db size`
(what status reads: daemon/health.py; what size measures: store/size.py).

Register in costguard/cli.py with:

    from costguard.daemon.commands import db_backup, db_compact, db_size, status
    app.command("status")(status)
    db_app.command("backup")(db_backup)
    db_app.command("compact")(db_compact)
    db_app.command("size")(db_size)
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from costguard.cli_common import cli_clock
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.errors import CostguardError
from costguard.plain_lines import stdout_console

if TYPE_CHECKING:  # imported when a command runs: `costguard --help` stays quick
    from costguard.config import Settings
    from costguard.store.db import Database

console = stdout_console()

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="costguard.yaml to read (default: ./costguard.yaml "
                 "if present, or $COSTGUARD_CONFIG)."),
]


def _open(settings: Settings) -> Database:
    from costguard.store.db import Database

    try:
        return Database(settings.database_url, migrate=False, create=False)
    except CostguardError as exc:
        raise _fail(exc) from None
    except Exception as exc:
        raise _fail(f"cannot open the database: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''}. Check database_url in "
                    "costguard.yaml or COSTGUARD_DATABASE_URL.") from None


def status(
    config: ConfigOpt = None,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format")] = "text",
) -> None:
    """Is costguard running and acting? Last cycle, pause switch, alerts, gaps.

    Example: costguard status --format json

    Exit status 0 when a cycle finished within 3 poll intervals and no scope has been
    unreadable for longer (degraded), 1 otherwise.
    """
    from costguard.daemon.health import DEGRADED_AFTER_CYCLES, gather_status

    settings = _settings(config)
    db = _open(settings)
    try:
        info = gather_status(db, cli_clock().now(), settings.poll_interval.total_seconds())
    finally:
        db.dispose()
    ident = settings.http.identity
    info["agent_auth"] = {
        "mode": ident.mode, "aws_forms": list(ident.aws_forms),
        "summary": ("instance identity required: cloud instances' readings come only from "
                    "agents that proved their instance; the shared token only for the "
                    "simulated cloud" if ident.required else
                    "instance identity optional: the shared token is accepted for every "
                    "instance, so whoever holds it can report any instance idle (set "
                    "http.identity.mode: required)")}
    if fmt == "json":
        print(json.dumps(info, indent=2))
    else:
        cycle = info["last_cycle"]
        if info["healthy"]:
            state = "[green]healthy[/]"
        elif info["cycling"]:
            state = (f"[yellow]degraded[/]: {len(info['degraded'])} scope(s) unreadable for "
                     f"over {DEGRADED_AFTER_CYCLES} cycles; governing "
                     f"{info['governed_instances']} instances")
        elif info["demo"]:
            state = "not cycling: a demo's store (costguard demo wrote it; no daemon cycles it)"
        else:
            state = "[red]not cycling[/]"
        console.print(f"costguard: {state}" + ("  [yellow]PAUSED[/] (costguard resume)"
                                               if info["paused"] else ""))
        if cycle:
            console.print(f"last cycle: #{cycle['id']} {cycle['status']} started "
                          f"{cycle['started_at']}" + (f" error: {cycle['error']}"
                                                      if cycle["error"] else ""),
                          highlight=False)
            if cycle["readings_dropped"]:
                dropped = ", ".join(f"{p} {n}" for p, n in cycle["readings_dropped"].items())
                console.print(f"[yellow]cloud GPU readings dropped[/] by the last cycle, not "
                              f"valid readings (no data, never idle; the log names them): "
                              f"{dropped}", highlight=False)
        else:
            console.print("last cycle: none yet (start the daemon: costguard run)")
        proven = info["proven_agents"]
        counted = ", ".join(f"{p} {n}" for p, n in sorted(proven.items())) or "none"
        mode = ("" if ident.required else "[yellow]") + info["agent_auth"]["summary"]
        console.print(f"agents: {mode}{'' if ident.required else '[/]'}", highlight=False)
        console.print(f"agents proven in the last 2 h: {counted}", highlight=False)
        alerts = ", ".join(f"{n} {state}" for state, n in sorted(info["alerts"].items()))
        console.print(f"alerts: {alerts or 'none'}; failed cycles: "
                      f"{info['failed_cycles']}, interrupted {info['interrupted_cycles']}, "
                      f"abandoned {info['abandoned_cycles']}; unresolved intents: "
                      f"{info['unresolved_action_intents']}", highlight=False)
        if info["unconfirmed_alert_deliveries"]:
            console.print(f"[yellow]unconfirmed alert deliveries:[/] "
                          f"{info['unconfirmed_alert_deliveries']} (costguard alerts list "
                          "--unconfirmed)", highlight=False)
        for gap in info["degraded"]:
            console.print(f"[red]unreadable:[/] {gap}", highlight=False)
        for gap in info["open_gaps"]:
            console.print(f"[yellow]gap:[/] {gap}", highlight=False)
    raise typer.Exit(0 if info["healthy"] else 1)


def backup_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite database (the online backup API, WAL included)."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def backup_postgres(url: str, target: Path) -> None:
    """`pg_dump --format=custom` (restore with pg_restore); the password goes by env."""
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_dump"),
                       key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    pg_dump = shutil.which("pg_dump") or (str(installed[-1]) if installed else None)
    if pg_dump is None:
        raise CostguardError("pg_dump is not installed: install the PostgreSQL client "
                             "(apt-get install postgresql-client) or back up with your "
                             "provider's snapshots")
    from sqlalchemy.engine import make_url

    sa = make_url(url)
    env = {"PATH": "/usr/bin:/bin"}
    if sa.password:
        env["PGPASSWORD"] = str(sa.password)
    argv = [pg_dump, "--format=custom", "--no-owner", f"--file={target}",
            f"--host={sa.host or 'localhost'}", f"--port={sa.port or 5432}",
            f"--username={sa.username or 'postgres'}", sa.database or "costguard"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise CostguardError(f"pg_dump failed: {done.stderr.strip()[-500:]}")


def db_backup(
    output: Annotated[Path, typer.Argument(help="File to write (overwritten if present).")],
    config: ConfigOpt = None,
) -> None:
    """Back up the database: SQLite with its online backup API, PostgreSQL with pg_dump.

    Example: costguard db backup costguard-$(date +%F).db
    """
    from sqlalchemy.engine import make_url

    settings = _settings(config)
    url = settings.database_url
    try:
        if url.startswith("sqlite"):
            database = make_url(url).database
            if not database or database == ":memory:" or not Path(database).exists():
                raise CostguardError(f"no SQLite database file at {database!r}; check "
                                     "database_url or run `costguard db upgrade` first")
            backup_sqlite(Path(database), output)
        else:
            backup_postgres(url, output)
    except CostguardError as exc:
        raise _fail(exc) from None
    except (OSError, sqlite3.Error) as exc:
        raise _fail(f"cannot write {output}: {exc}") from None
    console.print(f"backup written to {output} ({output.stat().st_size:,} bytes)",
                  highlight=False)


def db_compact(
    batch: Annotated[int, typer.Option(min=1, max=5000, help="Instances per transaction "
                                       "(each of two hours of their readings).")] = 50,
    config: ConfigOpt = None,
) -> None:
    """Fold the readings' finished hours into compressed blocks and hourly history, then
    prune both past accounting.readings_raw and accounting.readings_history.

    The daemon does this every hour. Run it once after upgrading a store whose readings
    predate revision 0020 to move them all now, with progress. Each batch commits on its
    own: interrupted, it loses nothing, and running it again goes on where it stopped.

    Example: costguard db compact
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from costguard.engine.maintain import settle_readings

    settings = _settings(config)
    db = _open(settings)  # refused, saying to upgrade, while the schema is not at head
    with Progress("settling readings", BarColumn(), MofNCompleteColumn(), "instances",
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task("settle", total=None)

        def advance(done: int, todo: int) -> None:
            bar.update(task, completed=done, total=todo)

        out = settle_readings(db, settings, cli_clock().now(), progress=advance)
    console.print(
        f"{out['settled_readings']:,} readings settled into {out['settled_blocks']:,} "
        f"instance-hours; pruned {out['pruned_blocks']:,} blocks past "
        f"accounting.readings_raw and {out['pruned_hours']:,} hours of history past "
        "accounting.readings_history"
        + (f"; {out['late_readings_dropped']:,} late readings of hours past the raw "
           "window dropped (their history kept)" if out["late_readings_dropped"] else ""),
        highlight=False)


def db_size(
    config: ConfigOpt = None,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format")] = "text",
    sample: Annotated[int, typer.Option(min=1, max=100_000, help="The newest blocks (and "
                                        "hours of history) decoded to measure what one "
                                        "holds.")] = 1_000,
) -> None:
    """What the store holds and takes on disk: each table's rows and bytes (indexes
    included), and what the readings cost: a GPU-minute still a row, one settled into a
    block, a GPU-hour of history. Reads only; counts every row.

    Example: costguard db size
    """
    from costguard.daemon.size_text import size_json, size_text
    from costguard.store.size import measure

    settings = _settings(config)
    db = _open(settings)
    try:
        got = measure(db, sample=sample)
    finally:
        db.dispose()
    if fmt == "json":
        typer.echo(json.dumps(size_json(got, settings), indent=2))
    else:
        for line in size_text(got, settings):
            console.print(line, highlight=False)


def commands_app() -> typer.Typer:
    """A sub-app holding both commands (tests, or `app.add_typer`)."""
    app = typer.Typer(no_args_is_help=True)
    app.command("status")(status)
    app.command("backup")(db_backup)
    app.command("compact")(db_compact)
    app.command("size")(db_size)
    return app
