"""CLI commands of the act stage: `costguard snooze`, `costguard audit`, `costguard simulate`.

Plain Typer command functions; the main app registers them with
`app.command("snooze")(snooze_command)` and so on.
"""

from __future__ import annotations

import getpass
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from costguard.cli_common import cli_clock, load_policies_or_exit
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.errors import CostguardError
from costguard.plain_lines import print_data, stdout_console

if TYPE_CHECKING:
    from costguard.config import Settings

console = stdout_console()


ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="costguard.yaml to read (default: ./costguard.yaml "
                 "if present, or $COSTGUARD_CONFIG)."),
]
Format = Literal["table", "json"]


def duration_arg(text: str) -> timedelta:
    from costguard.policy.base import duration_arg

    return duration_arg(text)


def _duration(text: str, option: str) -> timedelta:
    try:
        return duration_arg(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def _since(text: str, now: datetime) -> datetime:
    from costguard.report.run import ReportArgumentError, parse_when

    try:
        return parse_when(text, now, "--since")
    except ReportArgumentError as exc:
        raise _fail(exc) from None


def snooze_command(
    instance: Annotated[str, typer.Argument(
        help="Instance id, e.g. i-0abc... or a GCP name; or a volume, snapshot or address id.")],
    reason: Annotated[str, typer.Option(help="Why (kept in the audit trail).")],
    for_: Annotated[str, typer.Option("--for", help="How long: 30m, 4h, 2d.")] = "4h",
    by: Annotated[str | None, typer.Option(help="Who snoozes (default: your login).")] = None,
    no_tag: Annotated[bool, typer.Option("--no-tag", help="Do not set the snooze tag.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Postpone every policy's action on one instance, volume, snapshot or address (capped
    by each policy's max_snooze).

    Example: costguard snooze i-0abc123 --for 4h --reason "eval run starts at 3pm"
    """
    from costguard.actions.snooze import snooze
    from costguard.providers.registry import build_providers
    from costguard.store.db import Database

    duration = _duration(for_, "--for")
    if not reason.strip():
        raise typer.BadParameter("say why, e.g. --reason \"long eval tonight\"",
                                 param_hint="--reason")
    settings = _settings(config)
    policies = load_policies_or_exit(settings.policy_paths)
    clock = cli_clock()
    try:
        db = Database(settings.database_url)
        providers = {} if no_tag else build_providers(settings, clock)
        report = snooze(db, providers, policies.policies, instance, duration, reason.strip(),
                        by or getpass.getuser(), clock.now(), set_tag=not no_tag)
    except (CostguardError, ValueError) as exc:
        raise _fail(exc) from None
    if not report.results:
        console.print(f"{instance}: no policy selects it; nothing to snooze")
        return
    for r in report.results:
        cut = " (cut to the policy's max_snooze)" if r.cut else ""
        console.print(f"{r.policy}: snoozed until {r.until:%Y-%m-%d %H:%M} UTC{cut}")
    console.print(f"tag: {report.tag}", highlight=False)


def audit_command(
    since: Annotated[str, typer.Option(help="A duration back from now (24h) or a date.")] = "24h",
    instance: Annotated[str | None, typer.Option(
        help="Only this instance id (or volume, snapshot, address id).")] = None,
    policy: Annotated[str | None, typer.Option(help="Only this policy.")] = None,
    kind: Annotated[list[str], typer.Option(
        "--kind", help="finding, notify, tag, stop, start, terminate, snooze, skip, "
        "interrupted, snapshot, delete (repeatable).")] = [],  # noqa: B006
    interruptions: Annotated[bool, typer.Option(
        "--interruptions", help="Spot interruptions per instance type and zone instead.")] = False,
    fmt: Annotated[Format, typer.Option("--format")] = "table",
    config: ConfigOpt = None,
) -> None:
    """What costguard found and did, who/what/why with the evidence (append-only trail).

    Example: costguard audit --since 24h --instance i-0abc123 --format json
    """
    from costguard.actions.audit import audit_events, to_json
    from costguard.actions.spot import interruptions as count_interruptions
    from costguard.store.db import Database

    settings = _settings(config)
    start = _since(since, cli_clock().now())
    try:
        db = Database(settings.database_url, create=False)
    except CostguardError as exc:
        raise _fail(exc) from None
    with db.session() as s:
        if interruptions:
            counts = count_interruptions(s, start)
            if fmt == "json":
                print(json.dumps([vars(c) for c in counts], indent=2))
                return
            table = Table("instance type", "zone", "interruptions", title="Spot interruptions")
            for c in counts:
                table.add_row(c.instance_type, c.zone, str(c.count))
            console.print(table)
            return
        events = audit_events(s, start, instance_id=instance, policy=policy, kinds=kind)
    if fmt == "json":
        print_data(to_json(events))
        return
    from costguard.report.fit import FitColumn, fit_table

    # what identifies a row (when, which instance, which policy) is shown whole; the
    # evidence wraps, and the $/h and kind columns go first at 80 columns
    cols = [
        FitColumn("time (UTC)", [f"{e.at:%m-%d %H:%M}" for e in events], key=True),
        FitColumn("what", [e.kind for e in events]),
        FitColumn("status", [e.status + (" (dry)" if e.dry_run and "dry" not in e.status
                                         else "") for e in events]),
        FitColumn("policy", [e.policy for e in events], key=True),
        FitColumn("instance", [e.instance_id for e in events], key=True),
        FitColumn("$/h", [f"{e.usd_per_hour:,.2f}" for e in events], numeric=True),
        FitColumn("why / evidence", [e.detail + (f" [{e.evidence}]" if e.evidence
                                                 and e.evidence != e.detail else "")
                                     for e in events])]
    fitted = fit_table(cols, console.width, ["$/h", "what"],
                       title=f"Audit since {start:%Y-%m-%d %H:%M} UTC")
    console.print(fitted.table, crop=False)
    if fitted.dropped:
        console.print(f"Left out to fit {console.width} columns: {', '.join(fitted.dropped)} "
                      "(--format json shows every field).", highlight=False)
    if not events:
        console.print("Nothing recorded in this period.")


def simulate_command(
    policy_file: Annotated[list[Path] | None, typer.Option(
        "--policy", help="Policy file(s) or directory to replay.")] = None,
    recommendations: Annotated[bool, typer.Option(
        "--recommendations", help="Backtest `costguard recommend` instead: recommend at "
        "the start of history, score the fits on what followed.")] = False,
    since: Annotated[str, typer.Option(help="How far back: 30d, 48h, or a date.")] = "30d",
    name: Annotated[str | None, typer.Option(help="Only the policy with this name.")] = None,
    step: Annotated[str, typer.Option(help="Replay cycle length.")] = "10m",
    fmt: Annotated[Format, typer.Option("--format")] = "table",
    config: ConfigOpt = None,
) -> None:
    """Backtest: replay stored history through a policy; what would it have done?

    Example: costguard demo && costguard --database costguard-demo.db simulate
    --policy policies/idle-gpu.yml --since 7d. With --recommendations: what the cheaper
    fits of `costguard recommend` would have saved, and whether they would have held.
    """
    from costguard.policy.base import format_duration
    from costguard.simulate.backtest import MIN_STEP, backtest_policies, policies_named
    from costguard.store.db import Database

    settings = _settings(config)
    now = cli_clock().now()
    start = _since(since, now)
    if recommendations:
        _backtest_recommendations(settings, start, now, fmt)
        return
    if not policy_file:
        raise _fail("give --policy FILE (a policy to replay) or --recommendations")
    every = _duration(step, "--step")
    if every < MIN_STEP:  # 0s never ends; 1s repeats each minute
        raise _fail(f"--step {step!r}: at least {format_duration(MIN_STEP)}, please "
                    "(readings are a minute each)")
    policies = load_policies_or_exit(policy_file, configured=False)
    try:
        chosen = policies_named(policies.policies, name)
        db = Database(settings.database_url, create=False)  # it only reads history
    except (KeyError, CostguardError) as exc:
        raise _fail(exc.args[0] if isinstance(exc, KeyError) else exc) from None
    with db.session() as s:  # together: they share the fleet-wide `safety` caps, as live
        reports = backtest_policies(s, chosen, start, now, step=every, safety=settings.safety)
    if fmt == "json":
        print(json.dumps([r.as_json() for r in reports], indent=2))
        return
    for r in reports:
        console.print(f"[bold]{r.policy}[/] from {r.since:%Y-%m-%d %H:%M} to "
                      f"{r.until:%Y-%m-%d %H:%M} UTC: {r.warnings} warnings, "
                      f"{len(r.stops)} stops, ${r.saved_usd:,.2f} saved, "
                      f"{len(r.false_positives)} false positives (busy again within the hour)")
        table = Table("team", "stops", "notices", "saved $", "false positives")
        for team, t in r.by_team().items():
            table.add_row(team, str(t.stops), str(t.notices), f"{t.saved_usd:,.2f}",
                          str(t.false_positives))
        console.print(table)
        for a in r.false_positives:
            console.print(f"  false positive: {a.instance_id} stopped {a.at:%m-%d %H:%M}, "
                          f"busy again {a.busy_again_at:%H:%M}", highlight=False)
        if r.snoozed:
            console.print(f"  {len(r.snoozed)} past snoozes held instances off", highlight=False)
        for c in r.refusals:
            console.print(f"  cap: {c.at:%m-%d %H:%M} none of {len(c.instance_ids)} stopped "
                          f"({c.reason})", highlight=False)


def _backtest_recommendations(settings: Settings, start: datetime, now: datetime,
                              fmt: str) -> None:
    from costguard.report.run import catalog_for
    from costguard.simulate.recommendations import backtest_recommendations
    from costguard.store.db import Database

    try:
        db = Database(settings.database_url, create=False)  # it only reads history
        with db.session() as s:
            catalog = catalog_for(settings, s)
            bt = backtest_recommendations(s, start, now, catalog.quote, settings.recommend)
    except (ValueError, CostguardError) as exc:
        raise _fail(exc) from None
    if fmt == "json":
        print(json.dumps(bt.as_json(), indent=2))
        return
    held = sum(o.held for o in bt.outcomes)
    console.print(
        f"[bold]recommendations[/] judged {bt.since:%Y-%m-%d %H:%M} to {bt.cut:%Y-%m-%d %H:%M}, "
        f"scored to {bt.until:%Y-%m-%d %H:%M} UTC: {len(bt.outcomes)} of {bt.judged} GPU "
        f"instances given a cheaper fit, {held} held, {len(bt.outcomes) - held} would have "
        f"broken; ${bt.saved_usd:,.2f} saved (${bt.monthly_usd:,.2f}/month)", highlight=False)
    table = Table("instance", "team", "type", "fit", "held", "saved $")
    for o in bt.outcomes:
        i = o.fit.instance
        table.add_row(i.name or i.instance_id, o.team, i.instance_type,
                      o.fit.to.instance_type if o.fit.to else "-",
                      "yes" if o.held else "no", f"{o.saved_usd:,.2f}")
    console.print(table)
    for o in bt.outcomes:
        for why in o.broke:
            name = o.fit.instance.name or o.fit.instance.instance_id
            console.print(f"  would have broken: {name}: {why}", highlight=False)
