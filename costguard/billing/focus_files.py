"""FOCUS export files, CSV (plain or gzip) or Parquet, read into one row model: a dict per
charge line, keyed by the current FOCUS column names.

Both readers check the columns before the first row, so a file that is not a FOCUS export
fails naming what is missing and nothing of it is imported. The FOCUS version is told by the
columns (0.5, 1.0-preview, 1.0, 1.1, 1.2+), and columns a later version renamed are read
under their new name (AmortizedCost is EffectiveCost, ChargeType is ChargeCategory, Region
is RegionId, UsageQuantity/UsageUnit are ConsumedQuantity/ConsumedUnit). Values keep the
file's types (CSV gives text; Parquet gives Decimal or float, datetime, and for `Tags` a
JSON string, a map (a list of key/value pairs) or a list of {key, value} structs); the
parser accepts each. Rows are streamed: a file of any size is read in constant memory.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costguard.billing.bounded_input import MAX_LINE_BYTES, check_parquet, open_bounded
from costguard.billing.errors import BillingImportError
from costguard.billing.native_exports import detect
from costguard.limited_json import JsonRefused, parse_json

REQUIRED = ("BilledCost", "ChargePeriodStart", "ChargePeriodEnd")
_PARQUET_MAGIC = b"PAR1"
_GZIP_MAGIC = b"\x1f\x8b"
# a column's earlier name -> the name FOCUS gives it now (FOCUS_Spec CHANGELOG.md)
RENAMED = {"AmortizedCost": "EffectiveCost", "ChargeType": "ChargeCategory",
           "Region": "RegionId", "UsageQuantity": "ConsumedQuantity",
           "UsageUnit": "ConsumedUnit"}
csv.field_size_limit(MAX_LINE_BYTES)  # a Tags or SkuPriceDetails cell can be long
__all__ = ["BAD_ROW", "REQUIRED", "BillingImportError", "FocusFile", "open_focus"]
JSONL_DEPTH = 16  # a Google export's line nests records in lists in records: depth 4
_BATCH_ROWS = 10_000
BAD_ROW = "__not_a_row__"  # a row a reader could not parse: its value says why


@dataclass
class FocusFile:
    """A FOCUS export opened for reading: its columns, its rows and how to name a row."""

    path: Path
    kind: str  # "csv", "csv.gz", "jsonl", "jsonl.gz" or "parquet"
    columns: tuple[str, ...]  # as the file names them
    rows: Iterator[dict[str, Any]]  # keyed by the current names (RENAMED applied)
    version: str = "1.x"
    # a native export (AWS CUR, Google Cloud billing export): its name, and how one of its
    # rows becomes FOCUS rows (native_exports); None for FOCUS itself
    native: str | None = None
    expand: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None
    # CSV, JSON Lines: the line the record being read starts on (a quoted cell may span
    # lines)
    record_line: int = 0

    def where(self, index: int) -> str:
        """The row just read (`index`, 0-based) as a person finds it: its CSV line, or its
        Parquet row number."""
        if self.kind.startswith(("csv", "jsonl")):
            return f"{self.path.name}:{self.record_line}"
        return f"{self.path.name} row {index + 1}"

    @property
    def label(self) -> str:
        """What the file is, for a person: `FOCUS 1.2`, `AWS CUR 2.0`, ..."""
        return self.native or f"FOCUS {self.version}"


def open_focus(path: Path) -> FocusFile:
    """Open `path` as CSV, JSON Lines or Parquet (told apart by content, not by the file
    name): a FOCUS export, or a native AWS CUR or Google Cloud billing export."""
    if not path.is_file():
        raise BillingImportError(f"{path} does not exist or is not a file")
    with path.open("rb") as fh:
        magic = fh.read(4)
    gzipped = magic[:2] == _GZIP_MAGIC
    if magic == _PARQUET_MAGIC:
        found = _open_parquet(path)
    elif _first_char(path, gzipped) == "{":
        found = _open_jsonl(path, gzipped)
    else:
        found = _open_csv(path, gzipped=gzipped)
    if not all(c in found.columns for c in REQUIRED):
        native = detect(found.columns)
        if native is not None:
            found.native, found.expand = native
            return found
    found.version = focus_version(found.columns)
    renames = {old: new for old, new in RENAMED.items()
               if old in found.columns and new not in found.columns}
    if renames:
        found.rows = _renamed(found.rows, renames)
    present = set(found.columns) | set(renames.values())
    missing = [c for c in REQUIRED if c not in present]
    if missing:
        raise BillingImportError(
            f"{path.name}: not a billing export costguard reads, missing column(s) "
            f"{', '.join(missing)} (FOCUS 1.x needs {', '.join(REQUIRED)}; an AWS CUR needs "
            "line_item_unblended_cost and line_item_usage_start/end_date (a legacy CUR: "
            "lineItem/UnblendedCost and lineItem/UsageStartDate/EndDate); a Google Cloud "
            "billing export needs cost and usage_start/end_time; the file has "
            f"{', '.join(found.columns[:8]) or 'no columns'}"
            f"{', ...' if len(found.columns) > 8 else ''})")
    return found


def focus_version(columns: tuple[str, ...]) -> str:
    """The FOCUS version whose column set this is (the newest that explains the columns)."""
    have = set(columns)
    if have & {"ServiceProviderName", "HostProviderName", "InvoiceId", "PricingCurrency"}:
        return "1.2"
    if have & {"CapacityReservationId", "ServiceSubcategory", "SkuMeter", "SkuPriceDetails"}:
        return "1.1"
    if "ChargeClass" in have or "RegionId" in have:
        return "1.0"
    if "ChargeSubcategory" in have or "ChargeCategory" in have:
        return "1.0-preview"
    if "ChargeType" in have or "AmortizedCost" in have:
        return "0.5"
    return "1.x"


def _renamed(rows: Iterator[dict[str, Any]], renames: dict[str, str]
             ) -> Iterator[dict[str, Any]]:
    for row in rows:
        for old, new in renames.items():
            row[new] = row.pop(old, None)
        yield row


def _text(path: Path, gzipped: bool) -> io.TextIOBase:
    """The file as text, read within bounded_input's limits; closing it closes the file
    (the caller's `with`)."""
    return io.TextIOWrapper(open_bounded(path, gzipped), encoding="utf-8-sig", newline="")


def _first_char(path: Path, gzipped: bool) -> str:
    """The first character that is not white space (`{` opens JSON Lines), or ""."""
    try:
        with _text(path, gzipped) as fh:
            head = fh.read(4096)
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError):
        return ""
    return head.lstrip()[:1]


def _open_jsonl(path: Path, gzipped: bool) -> FocusFile:
    """JSON Lines (BigQuery's JSON export): one object per line; the first names the
    columns (a field a later row adds is read all the same)."""
    with _text(path, gzipped) as fh:
        for line in fh:
            if line.strip():
                try:
                    first = parse_json(line, max_depth=JSONL_DEPTH)
                except JsonRefused as exc:
                    raise BillingImportError(
                        f"{path.name}:1: not JSON Lines: {exc}") from None
                break
        else:
            first = {}
    if not isinstance(first, dict):
        raise BillingImportError(f"{path.name}:1: JSON Lines rows must be objects")
    found = FocusFile(path, "jsonl.gz" if gzipped else "jsonl", tuple(first), iter(()))
    found.rows = _jsonl_rows(found, gzipped)
    return found


def _jsonl_rows(source: FocusFile, gzipped: bool) -> Iterator[dict[str, Any]]:
    with _text(source.path, gzipped) as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            source.record_line = n
            try:
                row = parse_json(line, max_depth=JSONL_DEPTH)
            except JsonRefused as exc:
                row = {BAD_ROW: "not a JSON object" if str(exc).startswith("not JSON")
                       else f"not a JSON line a bill holds: {exc}"}
            if not isinstance(row, dict):  # a bad line: the parser names it and goes on
                row = {BAD_ROW: "not a JSON object"}
            yield row


def _open_csv(path: Path, *, gzipped: bool) -> FocusFile:
    try:
        with _text(path, gzipped) as fh:
            header = next(csv.reader(fh), [])
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError):
        raise BillingImportError(
            f"{path.name} is neither UTF-8 CSV (plain or gzip) nor Parquet: export FOCUS data "
            "as one of them") from None
    except csv.Error as exc:
        raise BillingImportError(f"{path.name}: the header is not CSV: {exc}") from None
    found = FocusFile(path, "csv.gz" if gzipped else "csv", tuple(h.strip() for h in header),
                      iter(()))
    found.rows = _csv_rows(found, gzipped)
    return found


def _csv_rows(source: FocusFile, gzipped: bool) -> Iterator[dict[str, Any]]:
    with _text(source.path, gzipped) as fh:
        reader = csv.DictReader(fh)
        reader.fieldnames = [f.strip() for f in reader.fieldnames or []]
        source.record_line = reader.line_num + 1
        try:
            for row in reader:
                if None in row:  # cells past the header's (csv.DictReader's restkey)
                    row = {BAD_ROW: f"{len(row[None])} more cells than the header's "
                                    f"{len(reader.fieldnames)}"}
                yield row
                source.record_line = reader.line_num + 1  # the next record starts here
        except csv.Error as exc:
            raise BillingImportError(
                f"{source.path.name}:{reader.line_num}: not CSV from here on: {exc}") from None


def _open_parquet(path: Path) -> FocusFile:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    try:
        reader = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise BillingImportError(f"{path.name} is not a readable Parquet file: {exc}") from None
    check_parquet(path, reader.metadata)
    columns = tuple(str(n) for n in reader.schema_arrow.names)
    found = FocusFile(path, "parquet", columns, iter(()))
    found.rows = _parquet_rows(found, reader)
    return found


def _parquet_rows(source: FocusFile, reader: Any) -> Iterator[dict[str, Any]]:
    """The rows; a FOCUS file's carry their key text (arrow_text.CONTENT), the text the
    column reader keys them by, where their columns have one."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    from costguard.billing.arrow_text import CONTENT, Unsupported, contents

    names = final_names(source.columns)
    for batch in reader.iter_batches(batch_size=_BATCH_ROWS):
        rows = batch.to_pylist()
        if source.native is None:
            try:
                texts = contents(pa.Table.from_batches([batch]).rename_columns(names))
            except (Unsupported, pa.ArrowException):
                texts = []
            for row, text in zip(rows, texts, strict=False):
                row[CONTENT] = text
        yield from rows


def final_names(columns: Sequence[str]) -> list[str]:
    """The columns under the names the readers key them by (RENAMED, where the file does
    not also have the new name)."""
    present = set(columns)
    return [RENAMED[c] if c in RENAMED and RENAMED[c] not in present else c for c in columns]
