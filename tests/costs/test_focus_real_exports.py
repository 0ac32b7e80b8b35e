"""FOCUS exports as clouds and tools really write them, from the spec's column definitions
(FOCUS_Spec CHANGELOG: 0.5 to 1.2): null written as text, every Tags shape, renamed columns,
charge categories and classes, currencies, provider names, gzip, bad lines skipped."""

from __future__ import annotations

import csv
import gzip
import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]
import pytest
from typer.testing import CliRunner

from costguard.billing.focus_files import focus_version, open_focus
from costguard.billing.importer import BillingImportError, import_focus
from costguard.billing.lines import parse_tags, provider_of
from costguard.costs.attribution import Attributor
from costguard.store.db import Database
from tests.costs.fleet import billing_lines

NOW = datetime(2026, 5, 20, tzinfo=UTC)
V12 = ["ServiceProviderName", "HostProviderName", "InvoiceIssuerName", "BillingAccountId",
       "SubAccountId", "ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory", "ChargeClass",
       "BilledCost", "EffectiveCost", "BillingCurrency", "ServiceName", "ResourceId",
       "RegionId", "Tags"]


def row(**kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ServiceProviderName": "AWS", "HostProviderName": "AWS", "InvoiceIssuerName": "AWS",
        "BillingAccountId": "100000000001", "SubAccountId": "200000000011",
        "ChargePeriodStart": "2026-05-01T00:00:00Z", "ChargePeriodEnd": "2026-05-01T01:00:00Z",
        "ChargeCategory": "Usage", "ChargeClass": "", "BilledCost": "10",
        "EffectiveCost": "10", "BillingCurrency": "USD", "ServiceName": "AmazonEC2",
        "ResourceId": "arn:aws:ec2:us-east-1:200000000011:instance/i-0abc",
        "RegionId": "us-east-1", "Tags": json.dumps({"team": "research"})}
    out.update(kw)
    return out


def write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str] | None = None,
              *, gz: bool = False) -> Path:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns or V12, quoting=csv.QUOTE_MINIMAL,
                            extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    data = text.getvalue().encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def load(db: Database, path: Path, **kw: Any) -> Any:
    with db.session() as s:
        return import_focus(s, path, Attributor(), NOW, **kw)


# -- null written as text ------------------------------------------------------------------
@pytest.mark.parametrize("null", ["NULL", "null", "None", "NaN", "\\N"])
def test_null_literals_are_empty_values(db: Database, tmp_path: Path, null: str) -> None:
    path = write_csv(tmp_path / "nulls.csv", [row(EffectiveCost=null, RegionId=null,
                                                  Tags=null, ChargeClass=null)])
    result = load(db, path)
    assert (result.added, result.skipped_count) == (1, 0)
    (line,) = billing_lines(db)
    assert line.effective_micros == 10_000_000  # a null EffectiveCost is the billed cost
    assert line.region is None and line.team is None and line.charge_class is None


def test_a_null_amount_is_a_skipped_line_not_zero(db: Database, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "f.csv", [row(), row(BilledCost="NULL")])
    result = load(db, path)
    assert result.added == 1 and result.skipped == [("f.csv:3", "BilledCost is empty")]


@pytest.mark.parametrize("amount", ["1e30", "1000000000000000000000", "9000000000000.5",
                                    "-1000000000000.01"])
def test_an_amount_past_a_trillion_dollars_is_a_skipped_line(db: Database, tmp_path: Path,
                                                             amount: str) -> None:
    # kept as micro-dollars in a 64-bit integer: `1e30` failed the whole import with a
    # decimal.InvalidOperation, a 22-digit one with the store's integer overflow, and
    # 9e12 (which fits) went in as nine trillion dollars through the column reader
    path = write_csv(tmp_path / "f.csv", [row(), row(BilledCost=amount),
                                          row(ChargePeriodStart="2026-05-01T01:00:00Z",
                                              ChargePeriodEnd="2026-05-01T02:00:00Z")])
    result = load(db, path)
    assert result.added == 2
    assert result.skipped == [("f.csv:3", f"BilledCost: {amount!r} is more than a trillion "
                                          "dollars")]
    assert sum(line.billed_micros for line in billing_lines(db)) == 20_000_000
    # a trillion is still an amount
    edge = write_csv(tmp_path / "edge.csv", [row(BilledCost="1000000000000",
                                                 ResourceId="i-edge")])
    assert load(db, edge).added == 1


# -- every Tags shape ----------------------------------------------------------------------
@pytest.mark.parametrize("tags", [
    '{"team": "research", "env": "prod"}',  # FOCUS: a JSON object
    '[{"key": "team", "value": "research"}, {"key": "env", "value": "prod"}]',  # GCP labels
    '[["team", "research"], ["env", "prod"]]',
    '{"team": "research", "env": "prod", "x_empty": null}',
])
def test_every_tags_text_shape_attributes_the_line(db: Database, tmp_path: Path,
                                                   tags: str) -> None:
    load(db, write_csv(tmp_path / "t.csv", [row(Tags=tags)]))
    (line,) = billing_lines(db)
    assert (line.team, line.env) == ("research", "prod")


def test_tag_values_keep_their_meaning() -> None:
    assert parse_tags('{"gpu": true, "n": 8, "gone": null}', "x") == {
        "gpu": "true", "n": "8", "gone": ""}  # FOCUS: a key without a value is `true`
    assert parse_tags("null", "x") == {} and parse_tags("[]", "x") == {}
    with pytest.raises(BillingImportError, match="not JSON"):
        parse_tags("team=research", "f.csv:2")
    with pytest.raises(BillingImportError, match="key/value"):
        parse_tags("[1, 2]", "f.csv:2")


@pytest.mark.parametrize("bad_line", [False, True])  # True: read line by line, not columnar
def test_aws_tag_schemes_fill_a_key_the_resource_does_not_have(
        db: Database, tmp_path: Path, bad_line: bool) -> None:
    """AWS's FOCUS exports keep the resource's own tags bare and prefix its other schemes
    (the FOCUS spec's Tags: one user-defined scheme unprefixed, the others prefixed), as CUR
    2.0's Tags column does: `accountTag/team` is the account's team, which a line inherits
    where the resource has none (the spec's tag finalization: resources over accounts);
    FOCUS 1.0 with AWS columns keeps cost categories in `x_CostCategories`, below every
    tag."""
    tags = json.dumps({"env": "dev", "accountTag/team": "platform", "accountTag/env": "prod",
                       "costCategory/project": "llm", "userAttribute/cost-center": "CC-9",
                       "aws:createdBy": "AssumedRole:AROA:ci"})
    own = json.dumps({"team": "vision", "accountTag/team": "platform"})
    columns = [*V12, "x_CostCategories"]
    path = write_csv(tmp_path / "focus-aws.csv", [
        row(Tags=tags, ResourceId="i-acct", x_CostCategories=""),
        row(Tags=own, ResourceId="i-own", BilledCost="20", EffectiveCost="20",
            x_CostCategories=json.dumps({"team": "finops", "cost-center": "CC-1"})),
        *([row(BilledCost="ten", x_CostCategories="")] if bad_line else [])], columns)
    assert load(db, path).skipped_count == bad_line
    acct, mine = billing_lines(db)
    assert (acct.team, acct.env, acct.project, acct.cost_center) == (
        "platform", "dev", "llm", None)
    assert (mine.team, mine.cost_center) == ("vision", "CC-1")
    assert parse_tags('{"resourceTags/user:team": "a", "accountTag/team": "b"}', "x")[
        "team"] == "a"


@pytest.mark.parametrize("kind", ["map", "structs", "json"])
def test_parquet_tags_as_a_map_a_list_of_structs_or_text(db: Database, tmp_path: Path,
                                                          kind: str) -> None:
    tags: Any
    if kind == "map":
        tags_type, tags = pa.map_(pa.string(), pa.string()), [("team", "vision")]
    elif kind == "structs":  # the GCP billing export's labels: ARRAY<STRUCT<key, value>>
        tags_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
        tags = [{"key": "team", "value": "vision"}]
    else:
        tags_type, tags = pa.string(), '{"team": "vision"}'
    schema = pa.schema([("BilledCost", pa.decimal128(18, 6)),
                        ("ChargePeriodStart", pa.timestamp("us", tz="UTC")),
                        ("ChargePeriodEnd", pa.timestamp("us", tz="UTC")),
                        ("ProviderName", pa.string()), ("Tags", tags_type)])
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([{
        "BilledCost": Decimal("3.5"), "ChargePeriodStart": datetime(2026, 5, 1, tzinfo=UTC),
        "ChargePeriodEnd": datetime(2026, 5, 2, tzinfo=UTC), "ProviderName": "Google Cloud",
        "Tags": tags}], schema=schema), path)
    assert load(db, path).added == 1
    (line,) = billing_lines(db)
    assert (line.team, line.provider, line.billed_micros) == ("vision", "gcp", 3_500_000)


# -- versions and renamed columns ----------------------------------------------------------
@pytest.mark.parametrize(("columns", "version"), [
    (["BilledCost", "AmortizedCost", "ChargeType", "Region", "ChargePeriodStart",
      "ChargePeriodEnd"], "0.5"),
    (["BilledCost", "EffectiveCost", "ChargeCategory", "ChargeSubcategory", "Region",
      "ChargePeriodStart", "ChargePeriodEnd"], "1.0-preview"),
    (["BilledCost", "ChargeClass", "RegionId", "ChargePeriodStart", "ChargePeriodEnd"], "1.0"),
    (["BilledCost", "ChargeClass", "SkuPriceDetails", "ChargePeriodStart",
      "ChargePeriodEnd"], "1.1"),
    (V12, "1.2"),
])
def test_the_version_is_told_by_the_columns(columns: list[str], version: str) -> None:
    assert focus_version(tuple(columns)) == version


def test_a_focus_0_5_file_is_read_under_the_current_names(db: Database, tmp_path: Path) -> None:
    columns = ["ProviderName", "BilledCost", "AmortizedCost", "ChargeType", "Region",
               "ChargePeriodStart", "ChargePeriodEnd", "SubAccountId", "Tags"]
    path = write_csv(tmp_path / "old.csv", [
        {"ProviderName": "Microsoft", "BilledCost": "12", "AmortizedCost": "9",
         "ChargeType": "usage", "Region": "westeurope", "SubAccountId": "sub-1",
         "ChargePeriodStart": "2026-05-01T00:00:00Z",
         "ChargePeriodEnd": "2026-05-02T00:00:00Z", "Tags": "{}"}], columns)
    assert open_focus(path).version == "0.5"
    result = load(db, path)
    (line,) = billing_lines(db)
    assert result.version == "0.5"
    assert (line.effective_micros, line.charge_category, line.region, line.provider) == (
        9_000_000, "Usage", "westeurope", "azure")


def test_a_file_that_is_not_focus_names_what_is_missing(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "cur.csv", [{"line_item_unblended_cost": "1"}],
                     ["line_item_unblended_cost"])
    with pytest.raises(BillingImportError, match=r"missing column.*BilledCost"):
        open_focus(path)


# -- charge categories and classes ---------------------------------------------------------
def test_credits_taxes_and_purchases_are_kept_apart_from_usage(db: Database,
                                                               tmp_path: Path) -> None:
    path = write_csv(tmp_path / "kinds.csv", [
        row(BilledCost="100", EffectiveCost="100"),
        row(ChargeCategory="Credit", BilledCost="-15", EffectiveCost="-15"),
        row(ChargeCategory="Tax", BilledCost="8.5", EffectiveCost="8.5"),
        row(ChargeCategory="Purchase", BilledCost="300", EffectiveCost="0"),
        row(ChargeCategory="Usage", ChargeClass="Correction", BilledCost="-2",
            EffectiveCost="-2"),
        row(ChargeCategory="Refund", BilledCost="1"),  # not a FOCUS category
    ])
    result = load(db, path)
    assert dict(result.by_category) == {"Usage": 98_000_000, "Credit": -15_000_000,
                                        "Tax": 8_500_000, "Purchase": 300_000_000}
    assert result.skipped_count == 1 and "ChargeCategory 'Refund'" in result.skipped[0][1]
    corrections = [ln for ln in billing_lines(db) if ln.charge_class == "Correction"]
    assert [ln.billed_micros for ln in corrections] == [-2_000_000]


# -- currencies ----------------------------------------------------------------------------
def test_a_currency_without_a_rate_refuses_the_file(db: Database, tmp_path: Path) -> None:
    rows = [row(**{"BilledCost": "10"}) for _ in range(6000)]  # past the first stored batch
    rows.append(row(BillingCurrency="EUR"))
    path = write_csv(tmp_path / "eur.csv", rows)
    with pytest.raises(BillingImportError, match=r"eur.csv:6002: billed in EUR.*--rate EUR="):
        load(db, path)
    assert billing_lines(db) == []  # one transaction: nothing was kept


def test_a_rate_converts_to_dollars_and_the_currency_is_kept(db: Database,
                                                             tmp_path: Path) -> None:
    path = write_csv(tmp_path / "eur.csv", [row(), row(BillingCurrency="eur", BilledCost="10",
                                                       EffectiveCost="5")])
    result = load(db, path, rates={"EUR": Decimal("1.08")})
    assert result.currencies == {"USD", "EUR"}
    eur = next(ln for ln in billing_lines(db) if ln.currency == "EUR")
    assert (eur.billed_micros, eur.effective_micros) == (10_800_000, 5_400_000)


# -- providers -----------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "ours"), [
    ("AWS", "aws"), ("Amazon Web Services", "aws"), ("Google Cloud", "gcp"),
    ("Google Cloud Platform", "gcp"), ("Microsoft", "azure"), ("Microsoft Azure", "azure"),
    ("Oracle Cloud Infrastructure", "oracle"), ("OCI", "oracle"), ("Snowflake", "snowflake"),
    ("  amazon  web services ", "aws"), ("NULL", None),
])
def test_provider_names_are_normalised(name: str, ours: str | None) -> None:
    assert provider_of(name) == ours


def test_lines_of_providers_not_governed_are_kept_under_their_name(db: Database,
                                                                   tmp_path: Path) -> None:
    path = write_csv(tmp_path / "multi.csv", [
        row(), row(ServiceProviderName="Microsoft", BilledCost="4"),
        row(ServiceProviderName="Oracle", BilledCost="2")])
    result = load(db, path)
    assert dict(result.by_provider) == {"aws": 10_000_000, "azure": 4_000_000,
                                        "oracle": 2_000_000}


# -- files ---------------------------------------------------------------------------------
def test_gzip_csv_with_quoted_newlines_imports_once(db: Database, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "focus.csv.gz", [
        row(ServiceName="Amazon\nEC2"), row(BilledCost="1.25"), row(BilledCost="x")], gz=True)
    first = load(db, path)
    assert first.added == 2
    # the first record spans lines 2-3: the bad one starts on line 5, not "4"
    assert first.skipped == [("focus.csv.gz:5", "BilledCost: 'x' is not a number")]
    assert load(db, path).duplicates == 2


def test_the_cli_summarises_skips_and_refuses_with_strict(db: Database, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from costguard.cli import app

    monkeypatch.setenv("COSTGUARD_DATABASE_URL", str(db.engine.url.render_as_string(
        hide_password=False)))
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", "[]")
    path = write_csv(tmp_path / "f.csv", [
        row(), row(ChargeCategory="Credit", BilledCost="-3"), row(BilledCost="ten"),
        row(ServiceProviderName="Microsoft", BilledCost="4")])
    runner = CliRunner()
    done = runner.invoke(app, ["billing", "import", str(path)])
    assert done.exit_code == 0, done.output
    assert "FOCUS 1.2: 3 line(s) imported, 0 already there, 1 skipped" in done.output
    assert "Credit -$3.00" in done.output
    assert "kept, not governed by costguard: azure" in done.output
    assert "skipped f.csv:4: BilledCost: 'ten' is not a number" in done.output
    assert "read line by line (slower): a value the column reader cannot read" in done.output
    strict = runner.invoke(app, ["billing", "import", str(path), "--strict"])
    assert strict.exit_code == 2 and "f.csv:4" in strict.output
    bad = runner.invoke(app, ["billing", "import", str(path), "--rate", "EUR"])
    assert bad.exit_code == 2 and "CUR=RATE" in bad.output
    doc = json.loads(runner.invoke(app, ["billing", "import", str(path), "--format",
                                         "json"]).output)
    assert doc["duplicates"] == 3 and doc["skipped_lines"] == [
        {"where": "f.csv:4", "why": "BilledCost: 'ten' is not a number"}]
    assert doc["read_by"] == "lines" and "'ten'" in doc["read_by_lines_because"]
    clean = write_csv(tmp_path / "clean.csv", [row(), row(BilledCost="2")])
    fast = json.loads(runner.invoke(app, ["billing", "import", str(clean), "--format",
                                          "json"]).output)
    assert (fast["read_by"], fast["read_by_lines_because"], fast["added"]) == (
        "columns", None, 1)  # row() itself was imported above


@pytest.mark.parametrize("amount", ["9" * 5000, "1e999999999", "-1e999999999"])
def test_an_amount_no_reader_could_hold_is_a_skipped_line_too(db: Database, tmp_path: Path,
                                                              amount: str) -> None:
    # 5,000 digits: the column reader read them as -1 (Arrow's cast), the line reader's
    # int() refuses past 4,300 (a ValueError); 1e999999999: abs() raised decimal.Overflow.
    # Each failed the whole import, or imported a wrong figure
    path = write_csv(tmp_path / "f.csv", [row(), row(BilledCost=amount)])
    result = load(db, path)
    assert result.added == 1 and result.skipped_count == 1
    assert result.skipped[0][1].endswith("is more than a trillion dollars")
