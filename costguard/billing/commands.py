"""`costguard billing import` and `costguard billing import-ce` (registered in cli.py): bills
into the store, each file read in bounded memory, every bad line named."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from costguard.cli_common import cli_clock, err
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.costs.commands import (
    ConfigOpt,
    FormatOpt,
    PoliciesOpt,
    _db,
    _policy_set,
    console,
)
from costguard.errors import ConfigError, CostguardError

if TYPE_CHECKING:
    from costguard.billing.store import ImportResult
    from costguard.config import Settings

billing_app = typer.Typer(help="Import what the cloud billed, to compare with estimates.",
                          no_args_is_help=True)


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
    from costguard.billing.importer import import_focus
    from costguard.billing.line_keys import Replacing
    from costguard.billing.rates import learn_rates
    from costguard.billing.store import ImportResult

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
    from botocore.exceptions import ProfileNotFound

    from costguard.billing.importer import import_cost_explorer
    from costguard.report.run import parse_when

    now = cli_clock().now()
    try:
        start = parse_when(since, now, "--since").date()
        end = parse_when(until, now, "--until").date() if until else now.date()
        try:
            session = boto3.Session(profile_name=profile)
        except ProfileNotFound:
            raise ConfigError(f"--profile {profile!r}: no such AWS profile in ~/.aws/config "
                              "or ~/.aws/credentials (AWS_CONFIG_FILE, "
                              "AWS_SHARED_CREDENTIALS_FILE); `aws configure list-profiles` "
                              "lists them") from None
        ce = session.client("ce", region_name="us-east-1")
        db = _db(config)
        with db.session() as s:
            result = import_cost_explorer(s, ce, start, end, now, tag_key=tag,
                                          dimension=dimension)
    except CostguardError as exc:
        raise _fail(exc) from None
    console.print(f"{result.added} day x {tag} line(s) imported, {result.duplicates} already "
                  f"there; billed ${result.billed_micros / 1e6:,.2f}")
