"""A FOCUS CSV is imported a column at a time (focus_columns) and stores exactly what the
line-by-line reader stores: the same day sums, the same line keys (a file imported one way
adds nothing imported the other), and a file it cannot take is left to the line-by-line
reader with nothing of it kept twice."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from costguard.billing import focus_columns, line_digests
from costguard.billing.focus_batches import tables
from costguard.billing.focus_files import open_focus
from costguard.billing.importer import ImportResult, import_focus
from costguard.costs.attribution import Attributor
from costguard.store.db import Database
from tests.costs.fleet import billing_lines

NOW = datetime(2026, 11, 3, tzinfo=UTC)
HEADER = ("BillingAccountId,SubAccountId,ProviderName,ChargePeriodStart,ChargePeriodEnd,"
          "ChargeCategory,ChargeClass,BilledCost,EffectiveCost,BillingCurrency,ServiceName,"
          "ResourceId,RegionId,Tags\n")
TAGS = [json.dumps({"team": "research", "env": "prod"}),
        json.dumps([{"key": "team", "value": "vision"}]), "{}", "NULL", ""]
PROVIDERS = ["AWS", "Amazon Web Services", " aws ", "Google Cloud", "Microsoft"]
CATEGORIES = ["Usage", "usage", "Credit", "Tax", ""]
AMOUNTS = ["12.3456785", "-0.0000005", "100", "0.00000049999", "7.", "1.5E-05", " 3.25 "]


def _csv(cell: str) -> str:
    return '"' + cell.replace('"', '""') + '"'


def export_text(lines: int = 120) -> str:
    """Lines over three days, in every shape the column reader takes."""
    rows = []
    for i in range(lines):
        day, hour = 1 + i % 3, i % 24
        start = f"2026-11-{day:02d}T{hour:02d}:00:00Z"
        end = f"2026-11-{day:02d}T{hour:02d}:59:59Z"
        effective = "NULL" if i % 11 == 0 else AMOUNTS[(i + 1) % len(AMOUNTS)]
        rows.append(",".join([
            "100000000001", "" if i % 7 == 0 else f"20000000000{i % 3}",
            PROVIDERS[i % len(PROVIDERS)], start, end, CATEGORIES[i % len(CATEGORIES)],
            "Correction" if i % 13 == 0 else "", AMOUNTS[i % len(AMOUNTS)], effective,
            "USD" if i % 2 else "", "Amazon Elastic Compute Cloud",
            f"i-{i % 5:04x}", "null" if i % 9 == 0 else "us-east-1",
            _csv(TAGS[i % len(TAGS)])]))
    rows += rows[:4]  # identical lines: each counts
    return HEADER + "\n".join(rows) + "\n"


def stored(db: Database) -> list[tuple[Any, ...]]:
    rows = [(r.source, r.group_key, r.charge_start, r.charge_end, r.provider, r.account,
             r.region, r.service, r.resource_id, r.team, r.project, r.env, r.cost_center,
             r.charge_category, r.charge_class, r.currency, r.billed_micros,
             r.effective_micros, r.lines) for r in billing_lines(db)]
    return sorted(rows, key=lambda row: [(v is None, str(v)) for v in row])


def summary(result: ImportResult) -> tuple[Any, ...]:
    return (result.read, result.added, result.duplicates, result.billed_micros,
            dict(result.by_category), dict(result.by_provider), result.currencies,
            result.skipped_count, result.format)


def imported(db: Database, path: Path, *, columns: bool,
             monkeypatch: pytest.MonkeyPatch, helper: bool = False) -> ImportResult:
    """Imported by the column reader (`helper`: its digests from the helper process) or
    line by line."""
    with monkeypatch.context() as m:
        m.setattr(line_digests, "HELPER_MIN_LINES", 0 if helper else 1 << 62)
        if not columns:
            m.setattr(focus_columns, "reads", lambda source: False)
        else:
            m.setattr(focus_columns, "import_columns", _without_falling_back)
        with db.session() as s:
            return import_focus(s, path, Attributor(), NOW)


class _MustNotFallBack(Exception):
    """Raised where the column reader would give the file to the line-by-line one."""


_import_columns = focus_columns.import_columns


def _without_falling_back(*args: Any) -> None:
    try:
        _import_columns(*args)
    except focus_columns.NotColumnar as why:
        raise _MustNotFallBack(str(why)) from None


@pytest.mark.parametrize("gzipped", [False, True])
def test_columns_store_what_lines_store(db: Database, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch, gzipped: bool) -> None:
    """On each backend (the column reader's keys and sums), beside SQLite read by lines."""
    export = tmp_path / ("focus.csv.gz" if gzipped else "focus.csv")
    data = export_text().encode()
    export.write_bytes(gzip.compress(data) if gzipped else data)
    by_columns = db
    by_lines = Database(f"sqlite:///{tmp_path / 'lines.db'}")
    try:
        with pytest.raises(_MustNotFallBack):  # the guard works: a bad file is noticed
            bad = tmp_path / "bad.csv"
            bad.write_text(HEADER + "1,2,AWS,2026-11-01T00:00:00Z,2026-11-01T01:00:00Z,"
                           "Usage,,twelve,1,USD,EC2,i-1,us-east-1,{}\n")
            imported(by_columns, bad, columns=True, monkeypatch=monkeypatch)
        one = imported(by_columns, export, columns=True, monkeypatch=monkeypatch,
                       helper=gzipped)
        other = imported(by_lines, export, columns=False, monkeypatch=monkeypatch)
        assert summary(one) == summary(other)
        assert one.added == 124 and one.duplicates == 0
        assert stored(by_columns) == stored(by_lines)
        teams = {row[9] for row in stored(by_columns)}
        assert teams == {"research", "vision", None}
        # the same keys: a file imported one way adds nothing imported the other
        assert imported(by_columns, export, columns=False,
                        monkeypatch=monkeypatch).duplicates == 124
        assert imported(by_lines, export, columns=True,
                        monkeypatch=monkeypatch).duplicates == 124
        assert stored(by_columns) == stored(by_lines)
    finally:
        by_lines.dispose()


def test_focus_0_5_names_are_read_under_the_current_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    export = tmp_path / "focus-0.5.csv"
    export.write_text("ProviderName,ChargePeriodStart,ChargePeriodEnd,ChargeType,BilledCost,"
                      "AmortizedCost,Region,ResourceId\n"
                      "AWS,2026-11-01T00:00:00Z,2026-11-01T01:00:00Z,Usage,10,8,us-west-2,i-1\n")
    db = Database(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        result = imported(db, export, columns=True, monkeypatch=monkeypatch)
        assert (result.added, result.format) == (1, "FOCUS 0.5")
        (day,) = billing_lines(db)
        assert (day.region, day.charge_category, day.effective_micros) == (
            "us-west-2", "Usage", 8_000_000)
    finally:
        db.dispose()


@pytest.mark.parametrize("bad_cell", ["twelve", "", "NULL"])
def test_a_file_left_to_the_line_reader_keeps_nothing_twice(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad_cell: str) -> None:
    """The bad line is in a later batch than the first: what the column reader stored of
    the earlier batches is undone before the line reader reads the file again."""
    monkeypatch.setattr(focus_columns, "_BLOCK_BYTES", 4096)
    monkeypatch.setattr(focus_columns, "_BATCH_ROWS", 50)
    text = export_text(200)
    lines = text.splitlines()
    bad = lines[150].split(",")
    bad[7] = bad_cell  # BilledCost
    lines[150] = ",".join(bad)
    export = tmp_path / "focus.csv"
    export.write_text("\n".join(lines) + "\n")
    with db.session() as s:
        result = import_focus(s, export, Attributor(), NOW)
    assert (result.read, result.added, result.skipped_count) == (203, 203, 1)
    assert result.skipped[0][0] == "focus.csv:151"
    assert sum(row.lines for row in billing_lines(db)) == 203


def test_another_currency_is_converted_line_by_line(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "eur.csv"
    export.write_text(HEADER + "1,2,AWS,2026-11-01T00:00:00Z,2026-11-01T01:00:00Z,Usage,,"
                      "10,10,EUR,EC2,i-1,eu-west-1,{}\n")
    with db.session() as s:
        result = import_focus(s, export, Attributor(), NOW, rates={"EUR": Decimal("1.08")})
    assert (result.added, result.currencies) == (1, {"EUR"})
    assert billing_lines(db)[0].billed_micros == 10_800_000


def parquet_export(path: Path, tags_type: str) -> None:
    """Typed columns as writers make them: decimal and float amounts (some null, some
    with all a double's digits), times with and without a zone, tags as a map, a list of
    {key, value} structs or JSON text."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    n = 90
    tags: list[Any] = []
    for i in range(n):
        pairs = [("team", ["research", "vision", "nlp"][i % 3]), ("env", "prod")][:1 + i % 2]
        if i % 10 == 0:
            tags.append(None)
        elif tags_type == "map":
            tags.append(pairs)
        elif tags_type == "structs":
            tags.append([{"key": k, "value": v} for k, v in pairs])
        else:
            tags.append(json.dumps(dict(pairs)))
    tag_type = {"map": pa.map_(pa.string(), pa.string()),
                "structs": pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])),
                "json": pa.string()}[tags_type]
    start = [datetime(2026, 11, 1 + i % 3, i % 24, tzinfo=UTC) for i in range(n)]
    table = pa.table({
        "BilledCost": pa.array([Decimal(AMOUNTS[i % 3].strip()) for i in range(n)],
                               pa.decimal128(18, 10)),
        # doubles as a computed cost is: 2.3000000000000003e-05 has 21 decimal places
        "EffectiveCost": pa.array([None if i % 7 == 0 else (i % 13) / 8 if i % 2 else
                                   (i % 13) * 0.023 / 1000 for i in range(n)], pa.float64()),
        "ChargePeriodStart": pa.array(start, pa.timestamp("ms", tz="America/New_York")),
        "ChargePeriodEnd": pa.array([s.replace(tzinfo=None) for s in start],
                                    pa.timestamp("us")),
        "ChargeCategory": pa.array([CATEGORIES[i % 4] for i in range(n)]).dictionary_encode(),
        "ProviderName": pa.array([PROVIDERS[i % len(PROVIDERS)] for i in range(n)]),
        "SubAccountId": pa.array([None if i % 5 == 0 else 200000000000 + i % 3
                                  for i in range(n)], pa.int64()),
        "ResourceId": pa.array([f"i-{i % 5:04x}" for i in range(n)]),
        "Tags": pa.array(tags, tag_type),
    })
    pq.write_table(pa.concat_tables([table, table.slice(0, 3)]), path, row_group_size=40)


@pytest.mark.parametrize("tags_type", ["map", "structs", "json"])
def test_parquet_columns_store_what_lines_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tags_type: str) -> None:
    export = tmp_path / "focus.parquet"
    parquet_export(export, tags_type)
    by_columns = Database(f"sqlite:///{tmp_path / 'columns.db'}")
    by_lines = Database(f"sqlite:///{tmp_path / 'lines.db'}")
    try:
        one = imported(by_columns, export, columns=True, monkeypatch=monkeypatch,
                       helper=tags_type != "json")
        other = imported(by_lines, export, columns=False, monkeypatch=monkeypatch)
        assert summary(one) == summary(other)
        assert (one.added, one.duplicates) == (93, 0)
        assert stored(by_columns) == stored(by_lines)
        assert {row[9] for row in stored(by_columns)} == {"research", "vision", "nlp", None}
        assert imported(by_columns, export, columns=False,
                        monkeypatch=monkeypatch).duplicates == 93
        assert imported(by_lines, export, columns=True,
                        monkeypatch=monkeypatch).duplicates == 93
    finally:
        by_columns.dispose()
        by_lines.dispose()


def test_digests_from_the_helper_process_are_the_importers_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper reads the file in the same batches and gives each line the digest the
    importing process would; a helper out of step is let go, and the rest hashed here."""
    export = tmp_path / "focus.csv"
    export.write_text(export_text(300))
    names = focus_columns._final_names(open_focus(export).columns)
    sizes = (4096, 50)
    batches = [t.rename_columns(names) for t in tables(export, "csv", 14, sizes)]
    assert len(batches) > 2
    own = [b"".join(line_digests.digests_of(t)) for t in batches]
    with line_digests.Digests(export, "csv", 14, names, sizes) as digests:
        assert digests.helper is None  # a file this small is hashed here
        assert [digests.of(t) for t in batches] == own
    monkeypatch.setattr(line_digests, "HELPER_MIN_LINES", 0)
    with line_digests.Digests(export, "csv", 14, names, sizes) as digests:
        assert [digests.of(t) for t in batches] == own
        assert digests.helper is not None  # every batch's digests came from it
    with line_digests.Digests(export, "csv", 14, names[::-1], sizes) as digests:  # awry
        assert [digests.of(t) for t in batches] == own
        assert digests.helper is None  # let go at the first batch that did not check


def test_occurrences_counted_in_bulk_are_those_counted_a_line_at_a_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Both readers must give identical lines the same occurrence, the window's turn
    included: the column reader counts a batch at once, the line reader a line at a time."""
    from costguard.billing.importer import _Occurrences

    monkeypatch.setattr(_Occurrences, "WINDOW", 5)
    lines = [b"%d" % n for n in [1, 2, 3, 4, 5, 6, 7, 1, 8, 9, 9, 2, 10, 11, 12, 13, 14, 15,
                                  1, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 3]]
    one, bulk = _Occurrences(), _Occurrences()
    each = [one.count(d) for d in lines]
    assert [n for i in range(0, len(lines), 7) for n in bulk.count_all(lines[i:i + 7])] == each
    assert each[7] == 2 and each[10] == 2 and each[-1] == 1  # 3 left the window long ago
