"""Typer sub-apps: `costguard billing`, `costguard anomaly` and `costguard budget`.

The lead registers them in cli.py:
    app.add_typer(billing_app, name="billing")
    app.add_typer(anomaly_app, name="anomaly")
    app.add_typer(budget_app, name="budget")
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.table import Table

from costguard.cli_common import cli_clock, load_policies_or_exit
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.errors import CostguardError

if TYPE_CHECKING:
    from decimal import Decimal

    from costguard.config import Settings
    from costguard.costs.bill_store import ImportResult
    from costguard.policy.schema import PolicySet
    from costguard.store.db import Database

console = Console()
err = Console(stderr=True)
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="costguard.yaml")]
PoliciesOpt = Annotated[Path | None, typer.Option(
    "--policies", help="Policy directory or file (default: the configured policy_paths).")]
FormatOpt = Annotated[Literal["text", "json"], typer.Option(
    "--format", help="text (a table) or json (for scripts).")]


billing_app = typer.Typer(help="Import what the cloud billed, to compare with estimates.",
                          no_args_is_help=True)
anomaly_app = typer.Typer(help="Spend anomalies: list them and teach the detector.",
                          no_args_is_help=True)
budget_app = typer.Typer(help="Monthly budgets from the policy files.", no_args_is_help=True)


def _db(config: Path | None, *, create: bool = True, settings: Settings | None = None
        ) -> Database:
    """The configured store (`settings` when the command has loaded them already)."""
    from costguard.store.db import Database

    return Database((settings or _settings(config)).database_url, create=create)


@billing_app.command("import")
def billing_import(
    files: Annotated[list[Path], typer.Argument(
        help="A FOCUS export (0.5 to 1.2), an AWS CUR (2.0 or legacy) or a Google Cloud "
        "billing export: CSV, JSON Lines (plain or gzip) or Parquet. Several files (a "
        "delivery's parts) are imported together, all or none.")],
    config: ConfigOpt = None,
    policies: PoliciesOpt = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse the whole file on its first bad line (default: skip it, "
        "say where and why).")] = False,
    rate: Annotated[list[str] | None, typer.Option(
        "--rate", metavar="CUR=RATE", help="US dollars per unit of a billing currency, for "
        "lines not billed in USD (repeatable), e.g. --rate EUR=1.08.")] = None,
    replace: Annotated[bool, typer.Option(
        "--replace", help="The files are a new delivery of the days they cover (a "
        "month-to-date export delivered again, lines restated): what earlier imports of "
        "this kind of export stored for those days is replaced. Give all of a delivery's "
        "parts in one command.")] = False,
    fmt: FormatOpt = "text",
) -> None:
    """Import a cost export (FOCUS, AWS CUR, Google Cloud billing export); attribution rules
    from the policies tag its lines.

    Lines that cannot be read are skipped and listed with their line number and reason;
    credits, taxes and purchases are kept apart from usage; lines of providers costguard
    does not govern are kept under their provider. Importing the same export again adds
    nothing; an export delivered again with restated lines is imported with --replace.
    Each billed instance costguard watched over the billed period gets its effective
    hourly rate learned from the bill (discounts included), used by its estimates from
    then on.

    Example: costguard billing import focus-2026-11.csv.gz --rate EUR=1.08
    """
    from costguard.costs.bill_rates import learn_rates
    from costguard.costs.bill_store import ImportResult
    from costguard.costs.billing import import_focus
    from costguard.costs.line_keys import Replacing

    rates = _rates(rate or [])
    replacing = Replacing() if replace else None
    try:
        settings = _settings(config)
        attributor = _import_attributor(policies, settings)
        db = _db(config, settings=settings)
        now = cli_clock().now()
        with db.session() as s:  # one transaction: all the files, or none
            results = [import_focus(s, file, attributor, now, strict=strict, rates=rates,
                                    replacing=replacing) for file in files]
        with db.session() as s:
            learned = learn_rates(s, now)
    except CostguardError as exc:
        raise _fail(exc) from None
    total = ImportResult.total(results)
    # a file of which nothing was imported is a failure (every line skipped), not a success
    failed = total.added == 0 and total.duplicates == 0 and total.skipped_count > 0
    replaced = None if replacing is None else {
        "days": len(replacing.days), "lines_before": replacing.lines,
        "billed_usd_before": replacing.billed_micros / 1e6}
    if fmt == "json":
        print(json.dumps({
            **_import_json(total), "replaced": replaced,
            "files": [{"file": str(f), **_import_json(r)}
                      for f, r in zip(files, results, strict=True)],
            "learned_rates": learned.learned,
            "billed_instances_not_watched": len(learned.not_watched)}, indent=2))
        if failed:
            raise typer.Exit(1)
        return
    for file, result in zip(files, results, strict=True):
        _print_import(result, f"{file.name}: " if len(files) > 1 else "")
    if replacing is not None:
        console.print(f"  replaced {len(replacing.days):,} day(s) an earlier import held: "
                      f"{replacing.lines:,} line(s), billed {_usd(replacing.billed_micros)}",
                      highlight=False)
    if learned.learned:
        console.print(f"  learned the effective hourly rate of {learned.learned} instance(s) "
                      "from their bill lines: their estimates use it from now on "
                      "(costguard prices show TYPE)", highlight=False)
    if failed:
        raise _fail(f"nothing imported: all {total.skipped_count:,} line(s) were skipped "
                    "(the reasons are above)", code=1)
    if total.first_charge is not None and total.last_charge is not None:
        since, until = total.first_charge.date(), total.last_charge.date()
        if total.last_charge.time() != total.last_charge.min.time() or until == since:
            until += timedelta(days=1)
        console.print(f"Compare: costguard report --by team --compare billed --since {since} "
                      f"--until {until}  (the bill's own period)", highlight=False)
    if total.skipped_count:
        console.print(f"{total.skipped_count:,} of {total.read + total.skipped_count:,} "
                      "line(s) skipped (listed above; --strict refuses such a file)",
                      highlight=False)


def _import_attributor(policies: Path | None, settings: Settings) -> Any:
    """The policies' attribution rules; importing a bill needs no policy, so where none is
    named and the configured paths do not exist, the default rules (docs/report.md)."""
    from costguard.costs.attribution import Attributor

    if (policies is None and settings.policy_paths
            and not any(p.exists() for p in settings.policy_paths)):
        err.print(f"no policies at {', '.join(map(str, settings.policy_paths))}: lines are "
                  "attributed by the default rules (team, project, env and cost-center "
                  "tags)", highlight=False)
        return Attributor()
    return Attributor(_policy_set(policies, settings).attribution)


def _usd(micros: int) -> str:
    return f"{'-' if micros < 0 else ''}${abs(micros) / 1e6:,.2f}"


def _import_json(result: ImportResult) -> dict[str, object]:
    return {
        "format": result.format, "focus_version": result.version or None,
        "read": result.read, "added": result.added,
        "duplicates": result.duplicates, "skipped": result.skipped_count,
        "skipped_lines": [{"where": w, "why": why} for w, why in result.skipped],
        "billed_usd": result.billed_micros / 1e6,
        "by_category_usd": {k: v / 1e6 for k, v in sorted(result.by_category.items())},
        "by_provider_usd": {k: v / 1e6 for k, v in sorted(result.by_provider.items())},
        "currencies": sorted(result.currencies), "read_by": result.read_by,
        "read_by_lines_because": result.read_by_lines_because or None}


def _print_import(result: ImportResult, name: str) -> None:
    """One file's summary (`name`: the file's, where there are several)."""
    from costguard.model import PROVIDERS

    console.print(f"{name}{result.format}: {result.added:,} line(s) imported, "
                  f"{result.duplicates:,} already there, {result.skipped_count:,} skipped; "
                  f"billed {_usd(result.billed_micros)}", highlight=False, markup=False)
    for label, sums in (("by charge", result.by_category), ("by provider", result.by_provider)):
        if sums:
            console.print(f"  {label}: " + ", ".join(
                f"{k} {_usd(v)}" for k, v in sorted(sums.items(), key=lambda kv: -kv[1])),
                highlight=False, markup=False)
    ungoverned = sorted(set(result.by_provider) - {*PROVIDERS, "(none)"})
    if ungoverned:
        console.print(f"  kept, not governed by costguard: {', '.join(ungoverned)}",
                      highlight=False, markup=False)
    if result.read_by_lines_because:
        console.print(f"  read line by line (slower): {result.read_by_lines_because}",
                      highlight=False, markup=False)
    for where, why in result.skipped:
        err.print(f"skipped {where}: {why}", highlight=False, markup=False)
    if result.skipped_count > len(result.skipped):
        err.print(f"... and {result.skipped_count - len(result.skipped):,} more skipped "
                  "(--format json lists the first 20; --strict refuses the file)")


def _rates(texts: list[str]) -> dict[str, Decimal]:
    from decimal import Decimal, InvalidOperation

    out: dict[str, Decimal] = {}
    for text in texts:
        code, _, value = text.partition("=")
        try:
            number = Decimal(value)
        except InvalidOperation:
            number = Decimal(0)
        if not code.strip().isalpha() or len(code.strip()) != 3 or not number > 0:
            raise typer.BadParameter(f"{text!r}: give CUR=RATE, US dollars per unit, e.g. "
                                     "EUR=1.08", param_hint="--rate")
        out[code.strip().upper()] = number
    return out


@billing_app.command("import-ce")
def billing_import_ce(
    config: ConfigOpt = None,
    since: Annotated[str, typer.Option(help="First day (2026-11-01) or a duration (30d).")] = "30d",
    until: Annotated[str | None, typer.Option(help="Day after the last (default today).")] = None,
    tag: Annotated[str, typer.Option(help="Cost-allocation tag to group by.")] = "team",
    dimension: Annotated[str, typer.Option(help="Dimension the tag fills.")] = "team",
    profile: Annotated[str | None, typer.Option(help="AWS profile.")] = None,
) -> None:
    """Import daily AWS spend per tag value from Cost Explorer (one paid API call per page).

    Example: costguard billing import-ce --since 2026-11-01 --tag team
    """
    import boto3

    from costguard.costs.billing import import_cost_explorer
    from costguard.report.run import parse_when

    now = cli_clock().now()
    try:
        start = parse_when(since, now, "--since").date()
        end = parse_when(until, now, "--until").date() if until else now.date()
        session = boto3.Session(profile_name=profile)
        ce = session.client("ce", region_name="us-east-1")
        db = _db(config)
        with db.session() as s:
            result = import_cost_explorer(s, ce, start, end, now, tag_key=tag,
                                          dimension=dimension)
    except CostguardError as exc:
        raise _fail(exc) from None
    console.print(f"{result.added} day x {tag} line(s) imported, {result.duplicates} already "
                  f"there; billed ${result.billed_micros / 1e6:,.2f}")


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
    out = Console(highlight=False, soft_wrap=True)
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
    from costguard.costs.budgets import budget_json, budget_status

    now = cli_clock().now()
    settings = _settings(config)
    pset = _policy_set(policies, settings)
    try:
        db = _db(config, create=False, settings=settings)
        with db.session() as s:
            statuses = [budget_status(s, b, now) for b in pset.budgets]
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

