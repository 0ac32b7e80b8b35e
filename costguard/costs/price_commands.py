"""`costguard prices refresh` and `costguard prices show` (registered in cli.py)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from costguard.cli_common import cli_clock, err
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.costs.commands import ConfigOpt, _db, console
from costguard.errors import CostguardError

prices_app = typer.Typer(
    help="Current list prices: fetch them from the clouds' price APIs, explain one.\n\n"
    "Example: costguard prices show p5.48xlarge", no_args_is_help=True)


@prices_app.command("refresh")
def prices_refresh(
    config: ConfigOpt = None,
    region: Annotated[list[str] | None, typer.Option(
        "--region", help="Region to price (repeatable; default: the fleet's).")] = None,
    itype: Annotated[list[str] | None, typer.Option(
        "--type", help="Instance or machine type (repeatable; default: the fleet's).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Fetch current list prices (AWS Price List API, GCP Cloud Billing Catalog API) for
    the regions and types the fleet uses, and keep them in the store with their date.

    Estimates use a fetched price instead of the shipped table from the next cycle on.
    The daemon does this daily (`costs.price_refresh_interval`); the simulated cloud has
    no price API.
    """
    from costguard.costs.prices import refresh_prices
    from costguard.providers.registry import build_providers

    clock = cli_clock()
    try:
        settings = _settings(config)
        providers = build_providers(settings, clock)
        with _db(config, settings=settings).session() as s:
            outcomes = refresh_prices(s, providers, clock.now(), regions=region or (),
                                      types=itype or ())
    except CostguardError as exc:
        raise _fail(exc) from None
    if as_json:
        print(json.dumps([{
            "provider": o.provider, "regions": o.regions, "types": o.types,
            "stored": o.stored, "unpriced": o.unpriced, "error": o.error, "note": o.note,
            "published": o.published.isoformat() if o.published else None,
        } for o in outcomes], indent=2))
    elif not outcomes:
        console.print("No configured provider has a price API (the simulated cloud has "
                      "none); estimates use the shipped tables.", highlight=False)
    for o in outcomes if not as_json else ():
        if o.error:
            err.print(f"{o.provider}: prices not refreshed: {o.error}", highlight=False,
                      markup=False)
            continue
        if o.note:
            console.print(f"{o.provider}: {o.note}", highlight=False)
            continue
        console.print(f"{o.provider}: {o.stored} price(s) stored for {len(o.types)} type(s) "
                      f"in {len(o.regions)} region(s)", highlight=False)
        if o.unpriced:
            console.print(f"  not in the price API (estimates keep the shipped table): "
                          f"{', '.join(o.unpriced[:10])}"
                          + (f" and {len(o.unpriced) - 10} more" if len(o.unpriced) > 10
                             else ""), highlight=False, markup=False)
    if any(o.error for o in outcomes):
        raise typer.Exit(1)


@prices_app.command("show")
def prices_show(
    instance_type: Annotated[str, typer.Argument(help="e.g. p5.48xlarge or a3-highgpu-8g")],
    config: ConfigOpt = None,
    region: Annotated[str | None, typer.Option("--region", help="Only this region.")] = None,
    provider: Annotated[str | None, typer.Option(
        "--provider", help="Only this provider (aws, gcp).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Explain the hourly price of a type: every price known for it (shipped table,
    fetched list price, override), how old each is, and which one estimates use; and the
    rates learned from bills for instances of the type.
    """
    from costguard.costs.prices import STALE_AFTER_DAYS, explain_price
    from costguard.report.run import catalog_for

    today = cli_clock().now().date()
    try:
        settings = _settings(config)
        with _db(config, settings=settings).session() as s:
            lines, learned = explain_price(s, catalog_for(settings), instance_type,
                                           provider=provider, region=region)
    except CostguardError as exc:
        raise _fail(exc) from None
    if as_json:
        doc: dict[str, Any] = {"instance_type": instance_type, "prices": [{
            "provider": p.provider, "region": p.region, "lifecycle": p.lifecycle,
            "usd_per_hour": p.usd_per_hour, "source": p.source,
            "as_of": p.as_of.isoformat() if p.as_of else None,
            "age_days": p.age_days(today), "fallback": p.fallback, "used": p.used,
        } for p in lines], "learned_from_bills": [{
            "provider": prov, "instance_id": iid, "usd_per_hour": usd, "source": src,
            "as_of": when.isoformat()} for prov, iid, usd, src, when in learned]}
        print(json.dumps(doc, indent=2))
        return
    if not lines and not learned:
        err.print(f"no price known for {instance_type!r}"
                  + (f" in {region}" if region else "")
                  + ". Check the spelling (e.g. p5.48xlarge, a3-highgpu-8g), or fetch it: "
                  f"costguard prices refresh --type {instance_type} --region REGION",
                  highlight=False, markup=False)
        raise typer.Exit(1)
    table = Table(title=f"Hourly price of {instance_type}", title_justify="left")
    for col in ("where", "USD/h", "source", "age", ""):
        table.add_column(col, justify="right" if col == "USD/h" else "left")
    for p in lines:
        age = p.age_days(today)
        marks = ["used" if p.used else ""]
        if p.fallback:
            marks.append("fallback")
        if age is not None and age > STALE_AFTER_DAYS:
            marks.append("stale")
        table.add_row(f"{p.provider} {p.region} {p.lifecycle}", f"${p.usd_per_hour:,.4f}",
                      p.source, "-" if age is None else f"{age}d",
                      " ".join(m for m in marks if m))
    console.print(table)
    for prov, iid, usd, src, _ in learned:
        console.print(f"{prov} {iid}: ${usd:,.4f}/h {src} (used for this instance)",
                      highlight=False, markup=False)
