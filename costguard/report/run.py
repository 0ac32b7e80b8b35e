"""`render_report`: what the `costguard report` command calls, for every output format."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from sqlmodel import Session

from costguard.clock import SystemClock
from costguard.costs.pricing import PriceCatalog, PriceOverrides
from costguard.costs.settings import costs_settings
from costguard.errors import CostguardError, StoreError
from costguard.plain_lines import file_console, print_data, stdout_console
from costguard.policy.base import duration_arg
from costguard.report.figures import Report
from costguard.report.queries import DIMENSIONS, catalog_spot_price, spend, unknown_value
from costguard.report.render import to_csv, to_json, to_table
from costguard.standing.report import StandingLine, paid_not_running
from costguard.standing.report import to_rich as standing_table
from costguard.standing.reservations import ReservationLine, unused_in
from costguard.standing.reservations import to_rich as reservations_table

if TYPE_CHECKING:
    from costguard.k8s.report import ClusterReport

FORMATS: tuple[str, ...] = ("table", "csv", "json", "html")


class ReportArgumentError(CostguardError, ValueError):
    """A report option costguard cannot use; the message says what would work."""


# The dates a person may give. A duration is at most 100 years (policy/base.py), so a
# window or a lookback taken from any of them is still a date.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def parse_when(text: str | datetime, now: datetime, option: str) -> datetime:
    """A duration back from `now` (30d, 12h) or a date/time (2026-11-01), as aware UTC."""
    if isinstance(text, datetime):
        return text if text.tzinfo else text.replace(tzinfo=UTC)
    try:
        back = duration_arg(text)
    except ValueError as exc:
        if _looks_like_duration(text):  # 3650000d: say why, not "neither"
            raise ReportArgumentError(f"{option}: {exc}") from None
    else:
        return now - back
    try:
        given = datetime.fromisoformat(text)
    except ValueError:
        raise ReportArgumentError(
            f"{option} {text!r} is neither a duration (30d, 24h) nor a date (2026-11-01)"
        ) from None
    try:
        when = given.astimezone(UTC) if given.tzinfo else given.replace(tzinfo=UTC)
    except OverflowError:  # 0001-01-01T00:00+05:00 is in the year 0 in UTC
        when = None
    if when is None or not EARLIEST <= when < LATEST:
        raise ReportArgumentError(
            f"{option} {text!r} is outside the dates costguard reads "
            f"({EARLIEST:%Y-%m-%d} to {LATEST - timedelta(days=1):%Y-%m-%d})")
    return when


def _looks_like_duration(text: str) -> bool:
    return bool(text.strip()) and text.strip()[-1:] in "wdhms" and text.strip()[0].isdigit()


def parse_filters(filters: Sequence[str] | Mapping[str, str] | None,
                  dimensions: Collection[str] = DIMENSIONS) -> dict[str, str]:
    """`DIMENSION=VALUE` filters, each dimension one of `dimensions` (an instance report's
    by default; a Kubernetes report passes its own)."""
    if not filters:
        return {}
    if isinstance(filters, Mapping):
        items = list(filters.items())
    else:
        items = []
        for f in filters:
            key, sep, value = f.partition("=")
            if not sep or not value:
                raise ReportArgumentError(
                    f"bad --filter {f!r}: use DIMENSION=VALUE, e.g. team=research")
            items.append((key.strip(), value.strip()))
    for key, _ in items:
        if key not in dimensions:
            raise ReportArgumentError(
                f"bad --filter dimension {key!r} (choose from: {', '.join(dimensions)})")
    return dict(items)


def parse_window(since: str | datetime, until: str | datetime | None, now: datetime
                 ) -> tuple[datetime, datetime]:
    """`--since` and `--until` (default `now`) as aware UTC, the first before the second."""
    start = parse_when(since, now, "--since")
    end = parse_when(until, now, "--until") if until else now
    if start >= end:
        raise ReportArgumentError(
            f"--since ({start:%Y-%m-%d %H:%M}) must be before --until ({end:%Y-%m-%d %H:%M})")
    return start, end


def catalog_for(settings: Any, session: Session | None = None) -> PriceCatalog:
    """The configured catalog (overrides); with `session`, also the list prices
    `costguard prices refresh` stored and the rates bills taught."""
    cs = costs_settings(settings)
    overrides = PriceOverrides.load(cs.price_overrides) if cs.price_overrides else None
    if session is None:
        return PriceCatalog(overrides=overrides)
    from costguard.costs.price_book import PriceBook

    return PriceCatalog(overrides=overrides, book=PriceBook.load(session))


def spend_report(
    session: Session, settings: Any, by: Sequence[str], since: datetime, until: datetime,
    filters: Mapping[str, str] | None = None, *, compare: str | None = None,
    waste: bool = True,
) -> Report:
    """The one spend query behind every figure a person reads (the report in each format,
    the demo's table): spot savings priced with the configured catalog wherever no spot run
    of a type was seen, so no surface shows a different number for the same data; and the
    waste beyond idle over the recommendation window ending at `until` (`waste=False`: for
    a surface that does not show it, such as CSV, which then skips reading the readings)."""
    from dataclasses import replace

    from costguard.costs.prices import price_warnings
    from costguard.recommend.run import recommend, waste_of
    from costguard.recommend.settings import RecommendSettings

    report = spend(session, list(by), since, until, filters,
                   spot_price=catalog_spot_price(catalog_for(settings)), compare=compare)
    warnings = tuple(w.text for w in price_warnings(session, since, until))
    if not waste:
        return replace(report, price_warnings=warnings)
    cfg = getattr(settings, "recommend", None) or RecommendSettings()
    recs = recommend(session, until, catalog_for(settings, session).quote, cfg, filters)
    return replace(report, price_warnings=warnings, waste=waste_of(recs))


def render_report(
    settings: Any, by: Sequence[str], since: str | datetime, until: str | datetime | None,
    filters: Sequence[str] | Mapping[str, str] | None, fmt: str, output: Path | None,
    *, compare: str | None = None, now: datetime | None = None,
    console: Console | None = None, cluster: str | None = None,
) -> str:
    """Query, render and print (table) or write (`output`, else stdout) one report.

    `now` ends the default window and anchors durations (default: the wall clock; the CLI
    passes its own clock's time).
    Raises `ReportArgumentError` (a CostguardError) for options it cannot use.
    Returns the rendered text (for the table format, what the console printed).
    """
    from costguard.store.db import Database

    if now is None:
        now = SystemClock().now()  # the CLI passes its own clock's time
    if fmt not in FORMATS:
        raise ReportArgumentError(f"unknown --format {fmt!r} (choose from: {', '.join(FORMATS)})")
    if _kubernetes(by, filters, cluster):
        return _cluster_report(settings, by, since, until, filters, fmt, output, now,
                               console, cluster, compare)
    for dim in by:
        if dim not in DIMENSIONS:
            raise ReportArgumentError(
                f"unknown --by {dim!r} (choose from: {', '.join(DIMENSIONS)})")
    if len(set(by)) != len(by):
        raise ReportArgumentError("each --by dimension may be given once")
    if compare not in (None, "billed"):
        raise ReportArgumentError(f"unknown --compare {compare!r} (the one choice: billed)")
    start, end = parse_window(since, until, now)
    wanted = parse_filters(filters)
    db = Database(settings.database_url, create=False)  # a report never creates one
    try:
        with db.session() as s:
            try:
                report = spend_report(s, settings, by, start, end, wanted, compare=compare,
                                      waste=fmt != "csv")
            except ValueError as exc:
                raise ReportArgumentError(str(exc)) from None
            standing = standing_lines(s, wanted, end)
            reserved = reservation_lines(s, wanted, start, end)
            if fmt == "html":
                from costguard.report.html import to_html

                text = to_html(report, s, now, standing, reserved)
            elif fmt == "json":
                text = to_json(report)
                if standing or reserved:
                    text = json.dumps(with_standing(json.loads(text), standing, reserved),
                                      indent=2)
            elif fmt == "csv":
                text = to_csv(report)
            else:
                unknown = [(dim, value, known) for dim, value in wanted.items()
                           if (known := unknown_value(s, dim, value)) is not None]
                return _table(report, output, console, unknown, standing, reserved)
    finally:
        db.dispose()
    if output is not None:
        output.write_text(text, encoding="utf-8")
    else:
        print_data(text)
    return text


def _kubernetes(by: Sequence[str], filters: Sequence[str] | Mapping[str, str] | None,
                cluster: str | None) -> bool:
    """A report of pods: --cluster given, or a dimension only a cluster has asked for."""
    from costguard.k8s.report import CLUSTER_ONLY

    keys = (list(filters) if isinstance(filters, Mapping)
            else [f.partition("=")[0].strip() for f in filters or ()])
    return cluster is not None or any(d in CLUSTER_ONLY for d in [*by, *keys])


def _cluster_report(
    settings: Any, by: Sequence[str], since: str | datetime, until: str | datetime | None,
    filters: Sequence[str] | Mapping[str, str] | None, fmt: str, output: Path | None,
    now: datetime, console: Console | None, cluster: str | None, compare: str | None,
) -> str:
    """The Kubernetes report (k8s/report.py): pods' GPU spend from each cluster's
    Prometheus, priced with the store's inventory where there is a store."""
    from costguard.k8s import report as kube
    from costguard.k8s.allocate import DIMENSIONS as POD_DIMENSIONS

    if compare is not None:
        raise ReportArgumentError("--compare billed compares instances with bills; a "
                                  "Kubernetes report has no bill lines per pod")
    if fmt == "html":
        raise ReportArgumentError("--format html is not available for Kubernetes reports "
                                  "yet; use table, csv or json")
    clusters = settings.kubernetes.cluster(cluster)
    if not clusters:
        raise ReportArgumentError("no Kubernetes cluster is configured: add one under "
                                  "kubernetes.clusters in costguard.yaml (docs/kubernetes.md)")
    start, end = parse_window(since, until, now)
    wanted = parse_filters(filters, POD_DIMENSIONS)
    report = read_clusters(settings, clusters, by, start, end, wanted)
    return kube.render(report, fmt, output, console)


def read_clusters(settings: Any, clusters: Sequence[Any], by: Sequence[str], start: datetime,
                  end: datetime, wanted: Mapping[str, str], session: Session | None = None
                  ) -> ClusterReport:
    """The clusters' `ClusterReport` over [start, end), their nodes priced with the store's
    inventory and prices where there is a store (the catalog's alone where there is none);
    `session`: the store already open (the console's)."""
    from costguard.k8s import report as kube
    from costguard.store.db import Database
    from costguard.store.inventory import current_instances

    cfg = settings.accounting
    if session is not None:
        inventory, catalog = current_instances(session), catalog_for(settings, session)
    else:
        try:
            db = Database(settings.database_url, create=False)
        except StoreError:
            inventory, catalog = [], catalog_for(settings)
        else:
            try:
                with db.session() as s:
                    inventory, catalog = current_instances(s), catalog_for(settings, s)
            finally:
                db.dispose()
    return kube.read_report(clusters, by, start, end, wanted, catalog=catalog,
                            inventory=inventory, idle_signal=cfg.idle_signal,
                            idle_below=cfg.idle_below)


def _why_empty(report: Report, unknown: Sequence[tuple[str, str, list[str]]]) -> list[str]:
    """What to say under a table with no row: a filter value nothing was ever recorded for,
    a filter with nothing in the window, or no spend at all yet."""
    if unknown:
        return [f"No spend was ever recorded for {dim}={value}; the {dim} values recorded: "
                f"{', '.join(known) or 'none yet'}." for dim, value, known in unknown]
    if report.filters:
        shown = ", ".join(f"{k}={v}" for k, v in report.filters.items())
        return [f"No spend for {shown} in this period (--since widens it)."]
    return ["No spend recorded in this period. Run `costguard run` first (the demo's spend: "
            "costguard --database costguard-demo.db report)."]


def standing_lines(s: Session, wanted: Mapping[str, str], now: datetime
                   ) -> list[StandingLine]:
    """The "paid for, not running" lines a report shows beside spend (at its window's end,
    as the last listing left them): by team (a team filter keeps that team's); none under
    filters a volume cannot answer."""
    if set(wanted) - {"team"}:
        return []
    return paid_not_running(s, now, team=wanted.get("team"))


def reservation_lines(s: Session, wanted: Mapping[str, str], since: datetime,
                      until: datetime) -> list[ReservationLine]:
    """The capacity reservations a report shows: their unused hours and dollars in its
    window (standing/reservations.py); none under filters a reservation cannot answer."""
    if set(wanted) - {"team"}:
        return []
    return unused_in(s, since, until, team=wanted.get("team"))


def with_standing(doc: dict[str, Any], lines: Sequence[StandingLine],
                  reserved: Sequence[ReservationLine] = ()) -> dict[str, Any]:
    """A report's JSON document with its "paid for, not running" lines and its capacity
    reservations (each when any)."""
    if lines:
        doc = doc | {"paid_not_running": [line.as_json() for line in lines]}
    if reserved:
        doc = doc | {"reservations": [line.as_json() for line in reserved]}
    return doc


def _table(report: Report, output: Path | None, console: Console | None,
           unknown: Sequence[tuple[str, str, list[str]]] = (),
           standing: Sequence[StandingLine] = (),
           reserved: Sequence[ReservationLine] = ()) -> str:
    def draw(con: Console) -> None:
        to_table(report, con)
        if standing:
            con.print()
            standing_table(standing, con)
        if reserved:
            con.print()
            reservations_table(reserved, con,
                               (report.until - report.since).total_seconds() / 3600)
        if not report.rows and report.by:
            for line in _why_empty(report, unknown):
                con.print(line, highlight=False)
        if report.compare == "billed" and not report.bill_total_micros:
            con.print("No bills imported for this period, so every gap reads -100%: import "
                      "one first (costguard billing import FILE).")
        elif report.compare == "billed" and not report.total.billed_micros:
            google = any(row[0] == "gcp" for row in report.billed_not_compared)
            con.print("No line of the bill names an instance costguard watches: the "
                      "billed column is empty and the bill is listed above by kind"
                      + (" (a Google Cloud standard export has no resources; export the "
                         "detailed one)." if google else "."))

    if output is not None:
        with output.open("w", encoding="utf-8") as fh:
            con = file_console(fh, width=160, record=True, no_color=True)
            draw(con)
        return con.export_text()
    con = console or stdout_console()
    draw(con)
    return ""
