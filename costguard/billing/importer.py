"""Billing import: what the cloud invoiced, beside what costguard estimated.

Sources: cost export files (FOCUS 0.5 to 1.2, AWS CUR 2.0 and legacy CUR, the Google Cloud
billing export; CSV, JSON Lines or Parquet; see focus_files and native_exports) and AWS
Cost Explorer `GetCostAndUsage` grouped by a cost-allocation tag. Each line is read by
billing.lines (attributed with the instances' attribution rules, in micro-dollars) and stored
by billing.store (summed per day). Each line's key is a hash of its content and its occurrence
in the file, so importing the same export twice adds nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Mapping
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from sqlmodel import Session

from costguard.billing import focus_columns
from costguard.billing.arrow_text import CONTENT
from costguard.billing.errors import BillingImportError
from costguard.billing.focus_files import BAD_ROW, REQUIRED, FocusFile, open_focus
from costguard.billing.line_keys import Replacing
from costguard.billing.lines import (
    BASE_CURRENCY,
    CurrencyError,
    LineReader,
    micros,
    parse_time,
)
from costguard.billing.store import ImportResult, has_legacy_keys, hash64, store_lines
from costguard.costs.attribution import Attributor
from costguard.errors import ConfigError
from costguard.store.db import begin_for_savepoints

__all__ = ["REQUIRED", "BillingImportError", "ImportResult", "import_cost_explorer",
           "import_focus"]


log = logging.getLogger(__name__)


class CostExplorerClient(Protocol):
    """The one call used from a boto3 `ce` client."""

    def get_cost_and_usage(self, **kwargs: Any) -> Mapping[str, Any]: ...

BILLED_DIMENSIONS = {"team": "team", "project": "project", "env": "env",
                     "cost-center": "cost_center", "account": "account",
                     "provider": "provider", "region": "region", "instance": "resource_id"}
# the `source` a native export's lines are stored under (their keys are their own)
_NATIVE_SOURCES = {"AWS CUR 2.0": "aws-cur", "AWS CUR (legacy)": "aws-cur",
                   "AWS CUR (legacy, Athena)": "aws-cur",
                   "Google Cloud billing export": "gcp-export"}


def parse_focus(source: FocusFile, attributor: Attributor, result: ImportResult | None = None,
                *, strict: bool = False, rates: Mapping[str, Decimal] | None = None,
                legacy: bool = False) -> Iterator[dict[str, Any]]:
    """The billing lines (see store.store_lines) of an opened export (its columns
    already checked). A line that cannot be read is skipped, with its place and reason in
    `result` (`strict`: refused); a currency without a rate refuses the file. `legacy`: the
    source has lines imported before revision 0013, so each line carries its old key too."""
    result = result if result is not None else ImportResult()
    seen = _Occurrences()
    reader = LineReader(attributor, rates or {})
    source_name = "focus" if source.native is None else _NATIVE_SOURCES[source.native]
    old_keys = _LegacyKeys() if legacy else None
    for n, raw in enumerate(source.rows):
        where = source.where(n)
        text = raw.pop(CONTENT, None)  # a Parquet row's text, as the column reader keys it
        try:
            if BAD_ROW in raw:
                raise BillingImportError(f"{where}: {raw[BAD_ROW]}")
            rows = source.expand(raw) if source.expand is not None else [raw]
            lines = [reader.line(row, where) for row in rows]
            contents = [text if text is not None and len(rows) == 1 else "\x1f".join(
                f"{k}\x1e{v}" for k, v in sorted(row.items(), key=_by_name)).encode()
                for row in rows]
            old = [old_keys.key(row) for row in rows] if old_keys is not None else None
        except CurrencyError:
            raise
        except _LINE_ERRORS as exc:
            # whatever makes one line unreadable skips that line, named, and no other:
            # BillingImportError says why in words; anything else by its kind
            reason = (str(exc) if isinstance(exc, BillingImportError) else
                      f"unreadable ({type(exc).__name__}: {str(exc)[:80]})")
            reason = reason.removeprefix(f"{where}: ").removeprefix(f"{where} ")
            if strict:
                raise BillingImportError(
                    f"{where}: {reason} (--strict: nothing imported)") from None
            result.skip(where, reason)
            continue
        for i, line in enumerate(lines):
            digest = hashlib.blake2b(contents[i], digest_size=8).digest()
            occurrence = seen.count(digest)
            line["source"] = source_name
            line["line_key"] = (int.from_bytes(digest, "big", signed=True) if occurrence == 1
                                else hash64(digest + b"#%d" % occurrence))
            if old is not None:
                line["legacy_key"] = old[i]
            yield line


# what reading one line can raise besides BillingImportError, from a cell no converter
# foresaw (a row's stray cells, a date at the calendar's edge, nesting, 5,000 digits)
_LINE_ERRORS = (BillingImportError, ValueError, TypeError, KeyError, IndexError,
                OverflowError, ArithmeticError, RecursionError, UnicodeError)


def _by_name(item: tuple[Any, Any]) -> str:
    return str(item[0])


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

    def count_all(self, digests: list[bytes]) -> list[int]:
        """`count` of each of `digests` in turn, in bulk where they are all new (the usual
        case: set operations instead of a lookup a line)."""
        out: list[int] = []
        i = 0
        while i < len(digests):
            if len(self.current) >= self.WINDOW:
                self.previous, self.current = self.current, {}
            chunk = digests[i:i + self.WINDOW - len(self.current)]
            fresh = set(chunk)
            if (len(fresh) == len(chunk) and fresh.isdisjoint(self.current)
                    and fresh.isdisjoint(self.previous)):
                self.current.update(dict.fromkeys(chunk, 1))
                out += [1] * len(chunk)
            else:
                out += [self.count(d) for d in chunk]
            i += len(chunk)
        return out


class _LegacyKeys:
    """The key revisions before 0013 gave a line: SHA-256 of its content as JSON and its
    occurrence in the file, in hex."""

    def __init__(self) -> None:
        self.seen = _Occurrences()

    def key(self, row: dict[str, Any]) -> str:
        content = json.dumps({k: str(v) for k, v in sorted(row.items())}, sort_keys=True)
        occurrence = self.seen.count(hashlib.blake2b(content.encode(), digest_size=8).digest())
        return hashlib.sha256(f"{content}#{occurrence}".encode()).hexdigest()


def import_focus(session: Session, path: Path, attributor: Attributor, now: datetime, *,
                 strict: bool = False, rates: Mapping[str, Decimal] | None = None,
                 replacing: Replacing | None = None) -> ImportResult:
    """Import a FOCUS export (CSV, gzip CSV or Parquet; FOCUS 0.5 to 1.2) into the billing
    lines, streaming. One transaction: a refused file leaves nothing behind. `replacing`:
    the file is a new delivery of the days it covers (line_keys.Replacing), whose earlier
    lines are removed."""
    source = open_focus(path)
    name = "focus" if source.native is None else _NATIVE_SOURCES[source.native]
    # (old keys only tell an import what it would add twice: a replaced day has none left)
    legacy = replacing is None and has_legacy_keys(session, name)
    if focus_columns.reads(source) and not legacy:
        result = ImportResult(version=source.version, format=source.label, read_by="columns")
        before = replacing.copy() if replacing is not None else None
        try:
            begin_for_savepoints(session)
            with session.begin_nested():  # undone if the file is left to the other reader
                focus_columns.import_columns(session, source, LineReader(attributor, rates or {}),
                                             result, _Occurrences(), now, replacing)
            return result
        except focus_columns.NotColumnar as why:
            log.info("%s: read line by line (%s)", path.name, why)
            because = str(why)
            source = open_focus(path)
            if replacing is not None and before is not None:  # the emptying was undone too
                replacing.restore(before)
    else:
        because = ""
    result = ImportResult(version=source.version if source.native is None else "",
                          format=source.label, read_by_lines_because=because)
    lines = parse_focus(source, attributor, result, strict=strict, rates=rates, legacy=legacy)
    store_lines(session, lines, now, result, replacing)
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
    legacy = has_legacy_keys(session, "aws-ce")
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
                lines.extend(_ce_lines(period, metric, column, tag_key, legacy))
            token = page.get("NextPageToken")
            if not token:
                break
    return store_lines(session, lines, now)


def _ce_lines(period: Mapping[str, Any], metric: str, column: str,
              tag_key: str, legacy: bool) -> Iterator[dict[str, Any]]:
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
        identity = f"{start.isoformat()}|{tag_key}|{value}|{metric}"
        line["line_key"] = hash64(identity)
        if legacy:
            line["legacy_key"] = hashlib.sha256(identity.encode()).hexdigest()
        yield line
