"""FOCUS export files, CSV or Parquet, read into one row model: a dict per charge line.

Both readers check the columns before the first row, so a file that is not a FOCUS export
fails naming what is missing and nothing of it is imported. Values keep the file's types
(CSV gives text; Parquet gives Decimal or float, datetime, and for `Tags` either a JSON
string or a map, which arrives as a list of key/value pairs); the parser accepts both.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costguard.errors import CostguardError

REQUIRED = ("BilledCost", "ChargePeriodStart", "ChargePeriodEnd")
_PARQUET_MAGIC = b"PAR1"
_BATCH_ROWS = 10_000


class BillingImportError(CostguardError, ValueError):
    """A billing file costguard cannot read; the message names the line and the fix."""


@dataclass
class FocusFile:
    """A FOCUS export opened for reading: its columns, its rows and how to name a row."""

    path: Path
    kind: str  # "csv" or "parquet"
    columns: tuple[str, ...]
    rows: Iterator[dict[str, Any]]

    def where(self, index: int) -> str:
        """`index` (0-based data row) as a person finds it: CSV line or Parquet row number."""
        if self.kind == "csv":
            return f"{self.path.name}:{index + 2}"  # line 1 is the header
        return f"{self.path.name} row {index + 1}"


def open_focus(path: Path) -> FocusFile:
    """Open `path` as CSV or Parquet (told apart by content, not by the file name)."""
    if not path.is_file():
        raise BillingImportError(f"{path} does not exist or is not a file")
    with path.open("rb") as fh:
        magic = fh.read(4)
    found = _open_parquet(path) if magic == _PARQUET_MAGIC else _open_csv(path)
    missing = [c for c in REQUIRED if c not in found.columns]
    if missing:
        raise BillingImportError(
            f"{path.name}: not a FOCUS export, missing column(s) {', '.join(missing)} "
            f"(FOCUS 1.x needs {', '.join(REQUIRED)}; the file has "
            f"{', '.join(found.columns[:8]) or 'no columns'}"
            f"{', ...' if len(found.columns) > 8 else ''})")
    return found


def _open_csv(path: Path) -> FocusFile:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            header = next(csv.reader(fh), [])
    except UnicodeDecodeError:
        raise BillingImportError(
            f"{path.name} is neither UTF-8 CSV nor Parquet: export FOCUS data as one of them"
        ) from None
    return FocusFile(path, "csv", tuple(h.strip() for h in header), _csv_rows(path))


def _csv_rows(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        reader.fieldnames = [f.strip() for f in reader.fieldnames or []]
        yield from reader


def _open_parquet(path: Path) -> FocusFile:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    try:
        reader = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise BillingImportError(f"{path.name} is not a readable Parquet file: {exc}") from None
    columns = tuple(str(n) for n in reader.schema_arrow.names)
    return FocusFile(path, "parquet", columns, _parquet_rows(reader))


def _parquet_rows(reader: Any) -> Iterator[dict[str, Any]]:
    for batch in reader.iter_batches(batch_size=_BATCH_ROWS):
        yield from batch.to_pylist()
