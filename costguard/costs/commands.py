"""Typer sub-apps: `costguard billing`, `costguard anomaly` and `costguard budget`.

The lead registers them in cli.py:
    app.add_typer(billing_app, name="billing")
    app.add_typer(anomaly_app, name="anomaly")
    app.add_typer(budget_app, name="budget")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from costguard.cli_common import cli_clock, load_policies_or_exit
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.errors import CostguardError
from costguard.plain_lines import stdout_console

if TYPE_CHECKING:

    from costguard.config import Settings
    from costguard.policy.schema import PolicySet
    from costguard.store.db import Database

console = stdout_console()
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="costguard.yaml")]
PoliciesOpt = Annotated[Path | None, typer.Option(
    "--policies", help="Policy directory or file (default: the configured policy_paths).")]
FormatOpt = Annotated[Literal["text", "json"], typer.Option(
    "--format", help="text (a table) or json (for scripts).")]


anomaly_app = typer.Typer(help="Spend anomalies: list them and teach the detector.",
                          no_args_is_help=True)
budget_app = typer.Typer(help="Monthly budgets from the policy files.", no_args_is_help=True)


def _db(config: Path | None, *, create: bool = True, settings: Settings | None = None
        ) -> Database:
    """The configured store (`settings` when the command has loaded them already)."""
    from costguard.store.db import Database

    return Database((settings or _settings(config)).database_url, create=create)


@anomaly_app.command("list")
def anomaly_list(
    config: ConfigOpt = None,
    since: Annotated[str, typer.Option(help="Duration or date.")] = "30d",
    fmt: FormatOpt = "text",
) -> None:
    """Anomalies found, newest first, with their explanation and status.

    Example: costguard anomaly list --since 7d
    """
    from costguard.costs.anomaly import anomalies_since, anomaly_json
    from costguard.report.run import parse_when

    try:
        start = parse_when(since, cli_clock().now(), "--since")
        db = _db(config, create=False)
        with db.session() as s:
            rows = anomalies_since(s, start)
    except CostguardError as exc:
        raise _fail(exc) from None
    if fmt == "json":
        print(json.dumps([anomaly_json(r) for r in rows], indent=2))
        return
    table = Table(title="Spend anomalies", title_justify="left")
    for name in ("id", "from", "until", "rule", "status", "explanation"):
        table.add_column(name)
    for r in rows:
        until = f"{r.ended_at:%Y-%m-%d %H:%M}" if r.ended_at else "ongoing"
        table.add_row(str(r.id), f"{r.bucket_start:%Y-%m-%d %H:%M}", until, r.rule, r.status,
                      r.explanation)
    if not rows:
        console.print(f"No spend anomalies since {start:%Y-%m-%d %H:%M} UTC (a rule judges "
                      "nothing until a whole season of spend is known: a day of hours, a week "
                      "of days).", highlight=False)
        return
    console.print(table)


@anomaly_app.command("show")
def anomaly_show(anomaly_id: Annotated[int, typer.Argument(help="Anomaly id.")],
                 config: ConfigOpt = None, fmt: FormatOpt = "text") -> None:
    """One anomaly in full: spend against the usual, and its causes down to instances.

    Example: costguard anomaly show 42
    """
    from costguard.costs.anomaly import AnomalyNotFound, anomaly_json
    from costguard.costs.explain import cause_lines
    from costguard.store.tables import AnomalyRow

    try:
        db = _db(config, create=False)
        with db.session() as s:
            row = s.get(AnomalyRow, anomaly_id)
            if row is None:
                raise AnomalyNotFound(anomaly_id)
    except CostguardError as exc:
        raise _fail(exc) from None
    if fmt == "json":
        print(json.dumps(anomaly_json(row, causes=True), indent=2, default=str))
        return
    out = stdout_console(highlight=False, soft_wrap=True)
    out.print(f"anomaly {row.id} ({row.status}): {row.explanation}", markup=False)
    until = (f"until {row.ended_at:%Y-%m-%d %H:%M} UTC" if row.ended_at
             else "still going on")
    out.print(f"{row.buckets} {row.granularity}(s) from {row.bucket_start:%Y-%m-%d %H:%M} UTC, "
              f"{until}, rule {row.rule}: ${row.actual_micros / 1e6:,.2f} against a usual "
              f"${row.baseline_micros / 1e6:,.2f}, impact ${row.impact_micros / 1e6:,.2f}",
              markup=False)
    for line in cause_lines(list(row.causes or []), limit=50):
        out.print(line, markup=False)
    out.print(f"Feedback: costguard anomaly ack {row.id} | costguard anomaly expected {row.id}",
              markup=False)


def _feedback(anomaly_id: int, verdict: str, config: Path | None) -> None:
    from costguard.costs.anomaly import give_feedback

    try:
        db = _db(config)
        with db.session() as s:
            row = give_feedback(s, anomaly_id, verdict, cli_clock().now())
            text = row.explanation
    except CostguardError as exc:
        raise _fail(exc) from None
    console.print(f"anomaly {anomaly_id} marked {verdict}: {text}")


@anomaly_app.command("ack")
def anomaly_ack(anomaly_id: Annotated[int, typer.Argument(help="Anomaly id.")],
                config: ConfigOpt = None) -> None:
    """Acknowledge an anomaly: handled; the rest of this run stays quiet.

    Example: costguard anomaly ack 42
    """
    _feedback(anomaly_id, "ack", config)


@anomaly_app.command("expected")
def anomaly_expected(anomaly_id: Annotated[int, typer.Argument(help="Anomaly id.")],
                     config: ConfigOpt = None) -> None:
    """Mark an anomaly expected: the new level is normal from now on.

    Example: costguard anomaly expected 42
    """
    _feedback(anomaly_id, "expected", config)


def _policy_set(policies: Path | None, settings: Settings) -> PolicySet:
    """The policies `--policies` names, else the configured ones (a missing path is exit 2)."""
    if policies is not None:
        return load_policies_or_exit([policies], configured=False)
    return load_policies_or_exit(settings.policy_paths)


@budget_app.command("status")
def budget_status_cmd(config: ConfigOpt = None, policies: PoliciesOpt = None,
                      fmt: FormatOpt = "text") -> None:
    """Each budget's spend this month and its forecast to month end.

    Example: costguard budget status --policies policies/
    """
    from costguard.costs.budgets import budget_json, budget_statuses

    now = cli_clock().now()
    settings = _settings(config)
    pset = _policy_set(policies, settings)
    try:
        db = _db(config, create=False, settings=settings)
        with db.session() as s:
            statuses = budget_statuses(s, pset.budgets, now)
    except CostguardError as exc:
        raise _fail(exc) from None
    if fmt == "json":
        print(json.dumps([budget_json(st) for st in statuses], indent=2))
        return
    from costguard.report.fit import FitColumn, fit_table

    cols = [
        FitColumn("budget", [st.budget for st in statuses], key=True),
        FitColumn("covers", [f"{st.dimension}={st.value}" for st in statuses]),
        FitColumn("budget $", [f"${st.budget_micros / 1e6:,.0f}" for st in statuses],
                  numeric=True),
        FitColumn("spent", [f"${st.actual_micros / 1e6:,.2f}" for st in statuses],
                  numeric=True),
        FitColumn("%", [f"{st.actual_percent:.0f}%" for st in statuses], numeric=True),
        FitColumn("forecast", [f"${st.forecast_micros / 1e6:,.2f}" for st in statuses],
                  numeric=True),
        FitColumn("forecast %", [f"{st.forecast_percent:.0f}%" for st in statuses],
                  numeric=True)]
    styles = ["red" if st.forecast_percent >= 100 else "yellow" if st.forecast_percent >= 80
              else None for st in statuses]
    fitted = fit_table(cols, console.width, ["%", "forecast %"],
                       title=f"Budgets {now:%Y-%m}", row_styles=styles)
    console.print(fitted.table, crop=False)
    if fitted.dropped:
        console.print(f"Left out to fit {console.width} columns: {', '.join(fitted.dropped)} "
                      "(--format json shows every field).", highlight=False)
    for basis in dict.fromkeys(st.forecast_basis for st in statuses):
        console.print(f"Forecast: {basis}.", highlight=False)
    if not statuses:
        console.print("No budgets defined: add a `budgets:` block to a policy file.")

