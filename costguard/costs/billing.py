"""Billing import: what the cloud invoiced, beside what costguard estimated.

Sources: cost export files (FOCUS 0.5 to 1.2, AWS CUR 2.0 and legacy CUR, the Google Cloud
billing export; CSV, JSON Lines or Parquet; see focus_files and native_exports) and AWS
Cost Explorer `GetCostAndUsage` grouped by a cost-allocation tag. Each line is read by
bill_lines (attributed with the instances' attribution rules, in micro-dollars). Each line's
key is a hash of its content and its occurrence in the file, so importing the same export
twice adds nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from functools import lru_cache
from operator import itemgetter
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Table, insert, select
from sqlalchemy.engine import Dialect
from sqlmodel import Session

from costguard.costs.attribution import Attributor
from costguard.costs.bill_errors import BillingImportError
from costguard.costs.bill_lines import (
    BASE_CURRENCY,
    CurrencyError,
    LineReader,
    micros,
    parse_time,
)
from costguard.costs.focus_files import BAD_ROW, REQUIRED, FocusFile, open_focus
from costguard.errors import ConfigError
from costguard.store.tables import BillingLineRow
from costguard.store.upsert import BindProcessors, driver_sql

__all__ = ["REQUIRED", "BillingImportError", "import_cost_explorer", "import_focus"]


class CostExplorerClient(Protocol):
    """The one call used from a boto3 `ce` client."""

    def get_cost_and_usage(self, **kwargs: Any) -> Mapping[str, Any]: ...

_T: Table = BillingLineRow.__table__  # type: ignore[attr-defined]
BILLED_DIMENSIONS = {"team": "team", "project": "project", "env": "env",
                     "cost-center": "cost_center", "account": "account",
                     "provider": "provider", "region": "region", "instance": "resource_id"}
# the `source` a native export's lines are stored under (their keys are their own)
_NATIVE_SOURCES = {"AWS CUR 2.0": "aws-cur", "AWS CUR (legacy)": "aws-cur",
                   "Google Cloud billing export": "gcp-export"}
_BATCH = 5_000


@dataclass
class ImportResult:
    read: int = 0
    added: int = 0
    duplicates: int = 0
    billed_micros: int = 0
    version: str = ""  # the FOCUS version; "" for a native export
    format: str = ""  # what the file is: "FOCUS 1.2", "AWS CUR 2.0", ...
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (where, why), first 20
    skipped_count: int = 0
    by_category: Counter[str] = field(default_factory=Counter)  # billed micros
    by_provider: Counter[str] = field(default_factory=Counter)
    currencies: set[str] = field(default_factory=set)

    def skip(self, where: str, why: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < 20:
            self.skipped.append((where, why))


def parse_focus(source: FocusFile, attributor: Attributor, result: ImportResult | None = None,
                *, strict: bool = False, rates: Mapping[str, Decimal] | None = None,
                ) -> Iterator[dict[str, Any]]:
    """The billing lines (billing_lines columns) of an opened export (its columns already
    checked). A line that cannot be read is skipped, with its place and reason in `result`
    (`strict`: refused); a currency without a rate refuses the file."""
    result = result if result is not None else ImportResult()
    seen = _Occurrences()
    reader = LineReader(attributor, rates or {})
    source_name = "focus" if source.native is None else _NATIVE_SOURCES[source.native]
    for n, raw in enumerate(source.rows):
        where = source.where(n)
        try:
            if BAD_ROW in raw:
                raise BillingImportError(f"{where}: {raw[BAD_ROW]}")
            rows = source.expand(raw) if source.expand is not None else [raw]
            lines = [reader.line(row, where) for row in rows]
        except CurrencyError:
            raise
        except BillingImportError as exc:
            if strict:
                raise BillingImportError(f"{exc} (--strict: nothing imported)") from None
            result.skip(where, str(exc).removeprefix(f"{where}: ").removeprefix(f"{where} "))
            continue
        for row, line in zip(rows, lines, strict=True):
            content = json.dumps({k: str(v) for k, v in sorted(row.items())}, sort_keys=True)
            # the key earlier imports stored: re-importing an export they read adds nothing
            occurrence = seen.count(hashlib.blake2b(content.encode(), digest_size=8).digest())
            line["source"] = source_name
            line["line_key"] = hashlib.sha256(f"{content}#{occurrence}".encode()).hexdigest()
            yield line


class _Occurrences:
    """How many times a line's content has been read so far in this file, so identical
    lines each count. Held for the most recent 2 x WINDOW distinct lines only, so memory
    stays flat in the file's size: an identical line further away than that reads as the
    same line exported twice."""

    WINDOW = 250_000

    def __init__(self) -> None:
        self.current: dict[bytes, int] = {}
        self.previous: dict[bytes, int] = {}

    def count(self, digest: bytes) -> int:
        n = self.current.get(digest) or self.previous.get(digest, 0)
        if len(self.current) >= self.WINDOW:
            self.previous, self.current = self.current, {}
        self.current[digest] = n + 1
        return n + 1


def store_lines(session: Session, lines: Iterable[dict[str, Any]], now: datetime,
                result: ImportResult | None = None) -> ImportResult:
    """Store `lines` (billing_lines columns) in batches (constant memory), skipping those
    already stored."""
    result = result if result is not None else ImportResult()
    batch: list[dict[str, Any]] = []
    for line in lines:
        result.read += 1
        batch.append(line)
        if len(batch) >= _BATCH:
            _store_batch(session, batch, now, result)
            batch = []
    _store_batch(session, batch, now, result)
    return result


def _store_batch(session: Session, batch: list[dict[str, Any]], now: datetime,
                 result: ImportResult) -> None:
    by_source: dict[str, list[str]] = defaultdict(list)
    for line in batch:
        by_source[line["source"]].append(line["line_key"])
    existing: set[tuple[str, str]] = set()
    for source, key_list in by_source.items():
        for i in range(0, len(key_list), 500):
            chunk = key_list[i:i + 500]
            existing |= {(source, k) for (k,) in session.execute(
                select(_T.c.line_key).where(_T.c.source == source, _T.c.line_key.in_(chunk)))}
    new: list[dict[str, Any]] = []
    for line in batch:
        key = (line["source"], line["line_key"])
        if key in existing:
            result.duplicates += 1
            continue
        existing.add(key)
        line["imported_at"] = now
        new.append(line)
        billed = line["billed_micros"]
        result.billed_micros += billed
        result.by_category[line["charge_category"] or "(none)"] += billed
        result.by_provider[line["provider"] or "(none)"] += billed
        result.currencies.add(line["currency"])
    if new:
        _insert(session, new)
    result.added += len(new)


_INSERT_COLS = [c.name for c in _T.columns if c.name != "id"]
_INSERT_ORDER = itemgetter(*_INSERT_COLS)


@lru_cache(maxsize=4)
def _insert_sql(dialect: Dialect) -> tuple[str, bool, BindProcessors]:
    return driver_sql(insert(_T), _T, _INSERT_COLS, dialect)


def _insert(session: Session, lines: list[dict[str, Any]]) -> None:
    """One executemany through the driver (`store.upsert.driver_sql`): SQLAlchemy's per-row
    parameter processing cost more than parsing the line. A column's bind processor runs
    once per distinct value (a bill repeats its hours)."""
    conn = session.connection()
    sql, positional, procs = _insert_sql(conn.dialect)
    converting: list[tuple[int, Callable[[Any], Any], dict[Any, Any]]] = [
        (i, procs[n], {}) for i, n in enumerate(_INSERT_COLS) if n in procs]
    params: list[Any] = []
    for line in lines:
        values = list(_INSERT_ORDER(line))
        for i, process, done in converting:
            raw = values[i]
            if raw is not None:
                if raw not in done:
                    done[raw] = process(raw)
                values[i] = done[raw]
        params.append(tuple(values) if positional else dict(zip(_INSERT_COLS, values,
                                                                strict=True)))
    conn.exec_driver_sql(sql, params)


def import_focus(session: Session, path: Path, attributor: Attributor, now: datetime, *,
                 strict: bool = False, rates: Mapping[str, Decimal] | None = None,
                 ) -> ImportResult:
    """Import a FOCUS export (CSV, gzip CSV or Parquet; FOCUS 0.5 to 1.2) into the billing
    lines, streaming. One transaction: a refused file leaves nothing behind."""
    source = open_focus(path)
    result = ImportResult(version=source.version if source.native is None else "",
                          format=source.label)
    store_lines(session, parse_focus(source, attributor, result, strict=strict, rates=rates),
                now, result)
    return result


def import_cost_explorer(
    session: Session, ce: CostExplorerClient, start: date, end: date, now: datetime, *,
    tag_key: str = "team", dimension: str = "team", metric: str = "UnblendedCost",
) -> ImportResult:
    """Daily AWS spend per value of cost-allocation tag `tag_key` over [start, end)."""
    column = BILLED_DIMENSIONS.get(dimension)
    if column not in ("team", "project", "env", "cost_center"):
        raise ConfigError(f"--dimension {dimension!r}: Cost Explorer tags fill an attribution "
                          "dimension: team, project, env or cost-center")
    from costguard.providers.aws.boundary import aws_call

    lines: list[dict[str, Any]] = []
    token: str | None = None
    with aws_call("ce/get_cost_and_usage"):
        while True:
            kwargs: dict[str, Any] = {
                "TimePeriod": {"Start": start.isoformat(), "End": end.isoformat()},
                "Granularity": "DAILY", "Metrics": [metric],
                "GroupBy": [{"Type": "TAG", "Key": tag_key}],
            }
            if token:
                kwargs["NextPageToken"] = token
            page = ce.get_cost_and_usage(**kwargs)
            for period in page.get("ResultsByTime", []):
                lines.extend(_ce_lines(period, metric, column, tag_key))
            token = page.get("NextPageToken")
            if not token:
                break
    return store_lines(session, lines, now)


def _ce_lines(period: Mapping[str, Any], metric: str, column: str,
              tag_key: str) -> Iterator[dict[str, Any]]:
    span = period["TimePeriod"]
    start = parse_time(span["Start"], "Cost Explorer TimePeriod")
    end = parse_time(span["End"], "Cost Explorer TimePeriod")
    groups = period.get("Groups") or []
    if not groups and period.get("Total"):
        groups = [{"Keys": [f"{tag_key}$"], "Metrics": period["Total"]}]
    for group in groups:
        raw = group["Keys"][0]
        value = raw.split("$", 1)[1] if "$" in raw else raw  # "team$research"; "team$" = untagged
        amount = group["Metrics"][metric]["Amount"]
        amount_micros = micros(amount, f"Cost Explorer {span['Start']} {raw}")
        line: dict[str, Any] = {
            "source": "aws-ce", "charge_start": start, "charge_end": end, "provider": "aws",
            "account": None, "region": None, "service": "(all services)",
            "resource_id": None, "billed_micros": amount_micros,
            "effective_micros": amount_micros, "team": None, "project": None, "env": None,
            "cost_center": None, "charge_category": None, "charge_class": None,
            "currency": group["Metrics"][metric].get("Unit") or BASE_CURRENCY,
        }
        line[column] = value or None
        line["line_key"] = hashlib.sha256(
            f"{start.isoformat()}|{tag_key}|{value}|{metric}".encode()).hexdigest()
        yield line
