"""FOCUS Parquet exports (written here by pyarrow): the same row model as CSV, Tags as a map
or as a JSON string, and bad files refused whole."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]
import pytest
from sqlalchemy import func, select

from costguard.billing.importer import BillingImportError, import_focus
from costguard.costs.attribution import Attributor
from costguard.report.queries import spend
from costguard.store.bill_tables import BillingCostRow
from costguard.store.db import Database
from tests.costs.fleet import billing_lines, parsed_lines

NOW = datetime(2026, 3, 20, tzinfo=UTC)
DAY = datetime(2026, 3, 8, tzinfo=UTC)
MONEY = pa.decimal128(18, 6)
TS = pa.timestamp("us", tz="UTC")


def focus_table(rows: list[dict[str, Any]], tags_type: pa.DataType,
                drop: str | None = None) -> pa.Table:
    schema = pa.schema([
        ("BilledCost", MONEY), ("EffectiveCost", MONEY), ("ChargePeriodStart", TS),
        ("ChargePeriodEnd", TS), ("ResourceId", pa.string()), ("ServiceName", pa.string()),
        ("ProviderName", pa.string()), ("SubAccountId", pa.string()),
        ("RegionId", pa.string()), ("Tags", tags_type),
    ])
    if drop is not None:
        schema = schema.remove(schema.get_field_index(drop))
        rows = [{k: v for k, v in r.items() if k != drop} for r in rows]
    return pa.Table.from_pylist(rows, schema=schema)


def line(billed: str, tags: Any, *, effective: str | None = None,
         resource: str = "i-0abc") -> dict[str, Any]:
    return {"BilledCost": Decimal(billed),
            "EffectiveCost": Decimal(effective) if effective is not None else None,
            "ChargePeriodStart": DAY, "ChargePeriodEnd": DAY + timedelta(days=1),
            "ResourceId": resource, "ServiceName": "Amazon Elastic Compute Cloud",
            "ProviderName": "AWS", "SubAccountId": "111111111111", "RegionId": "us-east-1",
            "Tags": tags}


def test_parquet_with_a_tags_map_imports_like_csv_and_only_once(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "focus-2026-03.parquet"
    pq.write_table(focus_table([
        line("100.005", [("team", "research"), ("env", "prod")]),
        line("100.005", [("team", "research"), ("env", "prod")]),  # identical lines both count
        line("7.25", [], effective="0", resource="vol-1"),  # a credit: effective 0 stays 0
        line("40", [("team", "vision")], effective="32.5"),
    ], pa.map_(pa.string(), pa.string())), export)
    with db.session() as s:
        first = import_focus(s, export, Attributor(), NOW)
    with db.session() as s:
        again = import_focus(s, export, Attributor(), NOW)
    assert (first.read, first.added, first.billed_micros) == (4, 4, 247_260_000)
    assert (again.added, again.duplicates) == (0, 4)
    got = [(r.billed_micros, r.effective_micros, r.lines, r.team, r.env, r.provider,
            r.account, r.region, r.resource_id, r.charge_start, r.charge_end)
           for r in billing_lines(db)]
    end = DAY + timedelta(days=1)
    assert got == [  # the day's sums: the two identical lines are one row of two lines
        (7_250_000, 0, 1, None, None, "aws", "111111111111", "us-east-1", "vol-1", DAY, end),
        (40_000_000, 32_500_000, 1, "vision", None, "aws", "111111111111", "us-east-1",
         "i-0abc", DAY, end),
        (200_010_000, 200_010_000, 2, "research", "prod", "aws", "111111111111", "us-east-1",
         "i-0abc", DAY, end),
    ]
    with db.session() as s:
        rep = spend(s, ["team"], DAY, end, compare="billed")
    # no instance of the bill is in costguard's inventory: all of it has its own rows
    assert rep.bill_total_micros == 247_260_000 and rep.rows == []
    assert sum(m for _, _, m in rep.billed_not_compared) == 247_260_000


def test_parquet_with_tags_as_json_text_and_naive_utc_times(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "export.parquet"
    rows = [line("12.5", json.dumps({"Team": "Research"})), line("3", None)]
    table = focus_table(rows, pa.string())
    naive = pa.timestamp("us")  # FOCUS times are UTC; some writers drop the zone
    for name in ("ChargePeriodStart", "ChargePeriodEnd"):
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, table.column(name).cast(naive))
    pq.write_table(table, export)
    with db.session() as s:
        result = import_focus(s, export, Attributor(), NOW)
    assert (result.added, result.billed_micros) == (2, 15_500_000)
    got = [(line["billed_micros"], line["team"], line["charge_start"])
           for line in parsed_lines(export)]
    # the default attributor reads the tag named like the dimension: "Team" is not "team"
    assert got == [(3_000_000, None, DAY), (12_500_000, None, DAY)]
    assert [(r.billed_micros, r.lines, r.team, r.charge_start) for r in billing_lines(db)] == [
        (15_500_000, 2, None, DAY)]


def test_parquet_without_a_required_column_names_it_and_writes_nothing(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "no-billed.parquet"
    pq.write_table(focus_table([line("5", [])], pa.map_(pa.string(), pa.string()),
                               drop="BilledCost"), export)
    with db.session() as s:
        with pytest.raises(BillingImportError, match=r"missing column\(s\) BilledCost \("):
            import_focus(s, export, Attributor(), NOW)
        assert not s.new  # nothing pending: even a caller that commits anyway writes nothing
    assert billing_lines(db) == []


def test_a_bad_parquet_row_is_skipped_and_strict_refuses_the_whole_file(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "bad-row.parquet"
    pq.write_table(focus_table([line("5", "{}"), line("6", "not json")], pa.string()), export)
    with db.session() as s:
        with pytest.raises(BillingImportError, match=r"bad-row.parquet row 2: Tags is not"):
            import_focus(s, export, Attributor(), NOW, strict=True)
        assert not s.new
    assert billing_lines(db) == []
    with db.session() as s:
        result = import_focus(s, export, Attributor(), NOW)
    assert result.added == 1 and result.skipped[0][0] == "bad-row.parquet row 2"


def test_a_damaged_parquet_file_is_refused_clearly(db: Database, tmp_path: Path) -> None:
    export = tmp_path / "cut.parquet"
    pq.write_table(focus_table([line("5", None)], pa.string()), export)
    export.write_bytes(export.read_bytes()[:40])  # the footer is gone
    with db.session() as s, pytest.raises(BillingImportError, match="not a readable Parquet"):
        import_focus(s, export, Attributor(), NOW)


def test_a_csv_header_without_rows_is_still_checked(db: Database, tmp_path: Path) -> None:
    export = tmp_path / "empty.csv"
    export.write_text("BilledCost,ChargePeriodStart\n")
    with db.session() as s, pytest.raises(BillingImportError,
                                          match=r"missing column\(s\) ChargePeriodEnd"):
        import_focus(s, export, Attributor(), NOW)
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(BillingCostRow)) == 0
