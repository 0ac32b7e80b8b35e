"""Native billing exports, unedited: AWS CUR 2.0 (Parquet with map columns, as Data Exports
writes it), legacy CUR (CSV, `lineItem/...` columns) and the Google Cloud billing export
(BigQuery rows as JSON Lines or Parquet with nested fields, or CSV from a flattening query).

Column names and types are those of the AWS Data Exports CUR 2.0 table dictionary
(docs.aws.amazon.com/cur/latest/userguide/table-dictionary-cur2.html: line item, savings
plan, reservation, product and resource_tags columns) and of Cloud Billing's "Structure of
Detailed data export" (cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/
detailed-usage: service, sku, project, labels, location, resource, cost, currency, credits,
cost_type). Amounts are worked out by hand in the comments.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]
import pytest
from typer.testing import CliRunner

from costguard.billing.focus_files import open_focus
from costguard.billing.importer import BillingImportError, import_focus, parse_focus
from costguard.costs.attribution import Attributor
from costguard.policy.spend import Attribution
from costguard.report.queries import spend
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from tests.costs.fleet import billing_lines, instance, parsed_lines

NOW = datetime(2026, 5, 20, tzinfo=UTC)
START = datetime(2026, 5, 1, tzinfo=UTC)
END = START + timedelta(hours=1)
ARN = "arn:aws:ec2:us-east-1:200000000011:instance/{}"
GCE = "//compute.googleapis.com/projects/ml-prod/zones/us-central1-a/instances/4711"


def cur(kind: str, unblended: float, resource: str = "", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "bill_payer_account_id": "100000000001", "line_item_usage_account_id": "200000000011",
        "line_item_line_item_type": kind, "line_item_usage_start_date": START,
        "line_item_usage_end_date": END, "line_item_product_code": "AmazonEC2",
        "line_item_resource_id": resource, "line_item_currency_code": "USD",
        "line_item_unblended_cost": unblended, "product_region_code": "us-east-1",
        "product": [("product_name", "Amazon Elastic Compute Cloud")],
        "resource_tags": [("user_team", "research")] if resource else [],
        "savings_plan_savings_plan_effective_cost": 0.0, "reservation_effective_cost": 0.0,
        "savings_plan_total_commitment_to_date": 0.0, "savings_plan_used_commitment": 0.0,
    }
    out.update(extra)
    return out


CUR_ROWS = [
    cur("Usage", 3.0, ARN.format("i-od")),
    # a Savings Plan covers i-sp: on-demand $21.957642, negated, $12 effective
    cur("SavingsPlanCoveredUsage", 21.957642, ARN.format("i-sp"),
        savings_plan_savings_plan_effective_cost=12.0),
    cur("SavingsPlanNegation", -21.957642, ARN.format("i-sp")),
    # the plan's hourly fee, all of it used: $12 billed, 0 unused
    cur("SavingsPlanRecurringFee", 12.0, savings_plan_total_commitment_to_date=12.0,
        savings_plan_used_commitment=12.0),
    cur("Tax", 1.5), cur("Credit", -2.0), cur("EdpDiscount", -0.5),
    cur("SomeTypeAwsAddsLater", 0.1),
]


def cur_table(rows: list[dict[str, Any]]) -> pa.Table:
    mapped = pa.map_(pa.string(), pa.string())
    fields = [(name, mapped if name in ("product", "resource_tags", "tags", "cost_category") else
               pa.timestamp("ms", tz="UTC") if isinstance(value, datetime) else
               pa.float64() if isinstance(value, float) else pa.string())
              for name, value in rows[0].items()]
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))


def imported(db: Database, path: Path, **kw: Any) -> Any:
    with db.session() as s:
        return import_focus(s, path, Attributor(), NOW, **kw)


def test_cur2_parquet_bills_unblended_amortises_savings_plans_and_keeps_every_category(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "cur2-00001.snappy.parquet"
    pq.write_table(cur_table(CUR_ROWS), export)
    result = imported(db, export)
    again = imported(db, export)
    assert (result.format, result.added, result.skipped_count) == ("AWS CUR 2.0", 8, 0)
    assert (again.added, again.duplicates) == (0, 8)
    # 3 + 21.957642 - 21.957642 + 12 + 1.5 - 2 - 0.5 + 0.1: the invoice
    assert result.billed_micros == 14_100_000
    assert dict(result.by_category) == {"Usage": 3_000_000, "Purchase": 12_000_000,
                                        "Tax": 1_500_000, "Credit": -2_500_000,
                                        "Adjustment": 100_000}
    lines = billing_lines(db)
    assert {line.source for line in lines} == {"aws-cur"}
    sp = [(line["billed_micros"], line["effective_micros"]) for line in parsed_lines(export)
          if line["resource_id"] == ARN.format("i-sp")]
    assert sp == [(-21_957_642, 0), (21_957_642, 12_000_000)]
    # stored as the day's sums: the negation cancels the covered usage's on-demand price
    (sp_day,) = [line for line in lines if line.resource_id == ARN.format("i-sp")]
    assert (sp_day.billed_micros, sp_day.effective_micros, sp_day.lines) == (0, 12_000_000, 2)
    fee = next(line for line in lines if line.charge_category == "Purchase")
    assert fee.effective_micros == 0  # every committed dollar was used by covered usage
    od = next(line for line in lines if line.resource_id == ARN.format("i-od"))
    assert (od.team, od.account, od.region, od.service, od.provider) == (
        "research", "200000000011", "us-east-1", "Amazon Elastic Compute Cloud", "aws")


def test_cur2_covered_usage_is_compared_at_its_savings_plan_rate(
        db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        record_inventory(s, "aws", [instance("i-sp", "p4d.24xlarge", team="research")
                                    .model_copy(update={"provider": "aws"})], START,
                         complete=True)
    export = tmp_path / "cur2.parquet"
    pq.write_table(cur_table(CUR_ROWS), export)
    imported(db, export)
    with db.session() as s:
        rep = spend(s, ["instance"], START, START + timedelta(days=1), compare="billed")
    assert rep.total.billed_micros == 12_000_000  # covered usage + negation, effective
    assert rep.bill_total_micros == 14_100_000


def test_legacy_cur_csv_reads_under_cur2_names_with_its_tag_columns(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "legacy-cur-00001.csv.gz"
    header = ["identity/LineItemId", "lineItem/UsageAccountId", "lineItem/LineItemType",
              "lineItem/UsageStartDate", "lineItem/UsageEndDate", "lineItem/ResourceId",
              "lineItem/UnblendedCost", "lineItem/CurrencyCode", "product/ProductName",
              "product/regionCode", "savingsPlan/SavingsPlanEffectiveCost",
              "resourceTags/user:team", "resourceTags/user:env", "costCategory/project"]
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerow(["a1", "200000000011", "SavingsPlanCoveredUsage", "2026-05-01T00:00:00Z",
                     "2026-05-01T01:00:00Z", "i-sp", "21.957642", "USD",
                     "Amazon Elastic Compute Cloud", "us-east-1", "12.0", "vision", "prod",
                     "llm"])
    writer.writerow(["a2", "200000000011", "Usage", "2026-05-01T00:00:00Z",
                     "2026-05-01T01:00:00Z", "i-x", "ten", "USD", "Amazon EC2", "us-east-1",
                     "", "", "", ""])
    export.write_bytes(gzip.compress(buf.getvalue().encode()))
    result = imported(db, export)
    assert (result.format, result.added, result.skipped_count) == ("AWS CUR (legacy)", 1, 1)
    assert result.skipped == [("legacy-cur-00001.csv.gz:3",
                               "line_item_unblended_cost: 'ten' is not a number")]
    with pytest.raises(BillingImportError, match=(  # --strict names the line too
            r"^legacy-cur-00001\.csv\.gz:3: line_item_unblended_cost: 'ten' is not a number "
            r"\(--strict")):
        imported(db, export, strict=True)
    (line,) = billing_lines(db)
    assert (line.billed_micros, line.effective_micros, line.team, line.env, line.region,
            line.project) == (21_957_642, 12_000_000, "vision", "prod", "us-east-1", "llm")


def test_legacy_cur_for_athena_reads_its_flattened_tag_columns(
        db: Database, tmp_path: Path) -> None:
    """A legacy CUR delivered for Athena: Parquet, every column lower snake case, each
    activated tag its own column (`resourceTags/user:CostCenter` ->
    resource_tags_user_cost_center, `aws:createdBy` -> resource_tags_aws_created_by; the
    column names of AWS's own CUR query library and of every Athena CUR table)."""
    columns = {
        "identity_line_item_id": pa.string(), "bill_payer_account_id": pa.string(),
        "line_item_usage_account_id": pa.string(), "line_item_line_item_type": pa.string(),
        "line_item_usage_start_date": pa.timestamp("ms"),
        "line_item_usage_end_date": pa.timestamp("ms"),
        "line_item_resource_id": pa.string(), "line_item_unblended_cost": pa.float64(),
        "line_item_currency_code": pa.string(), "product_product_name": pa.string(),
        "product_region": pa.string(), "resource_tags_user_team": pa.string(),
        "resource_tags_user_cost_center": pa.string(), "resource_tags_user_env": pa.string(),
        "resource_tags_aws_created_by": pa.string()}
    naive = START.replace(tzinfo=None)
    base = {"identity_line_item_id": "x", "bill_payer_account_id": "100000000001",
            "line_item_usage_account_id": "200000000011", "line_item_line_item_type": "Usage",
            "line_item_usage_start_date": naive, "line_item_usage_end_date": naive + (END - START),
            "line_item_currency_code": "USD", "product_product_name": "Amazon EC2",
            "product_region": "us-east-1", "resource_tags_user_team": None,
            "resource_tags_user_cost_center": None, "resource_tags_user_env": None,
            "resource_tags_aws_created_by": None}
    rows = [{**base, "line_item_resource_id": "i-tagged", "line_item_unblended_cost": 4.0,
             "resource_tags_user_team": "vision", "resource_tags_user_cost_center": "CC-7",
             "resource_tags_user_env": "prod",
             "resource_tags_aws_created_by": "AssumedRole:AROAEXAMPLE:ci"},
            {**base, "line_item_resource_id": "i-bare", "line_item_unblended_cost": 1.0}]
    export = tmp_path / "WorkshopCUR-00001.snappy.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema(list(columns.items()))), export)
    result = imported(db, export)
    assert (result.format, result.added, result.billed_micros) == (
        "AWS CUR (legacy, Athena)", 2, 5_000_000)
    bare, tagged = billing_lines(db)
    # the default dimensions read the flattened keys: cost_center is cost-center's column
    assert (tagged.team, tagged.env, tagged.cost_center, tagged.region, tagged.service) == (
        "vision", "prod", "CC-7", "us-east-1", "Amazon EC2")
    assert (bare.team, bare.cost_center) == (None, None)
    # keys an attribution block names in any spelling find the flattened column
    rules = Attribution.model_validate({"dimensions": {
        "team": {"keys": ["aws:createdBy"]}, "cost-center": {"keys": ["CostCenter"]}}})
    (line,) = [line for line in parse_focus(open_focus(export), Attributor(rules))
               if line["resource_id"] == "i-tagged"]
    assert (line["team"], line["cost_center"]) == ("AssumedRole:AROAEXAMPLE:ci", "CC-7")


def test_cur2_tags_column_takes_the_resource_over_its_account_over_cost_categories(
        db: Database, tmp_path: Path) -> None:
    """CUR 2.0's `tags` map (Data Exports' Tags column: every tag, its key prefixed by where
    it comes from): a resource's own tag over its account's over a cost category's; an IAM
    Identity Center user's attribute is not the resource's."""
    tagged = {"resourceTags/user:team": "vision", "accountTag/team": "platform",
              "accountTag/env": "prod", "costCategory/project": "llm",
              "costCategory/env": "staging", "userAttribute/cost-center": "CC-USER"}
    rows = [cur("Usage", 2.0, ARN.format("i-tags"), resource_tags=[],
                tags=list(tagged.items()), cost_category=[]),
            cur("Usage", 1.0, ARN.format("i-acct"), resource_tags=[],
                tags=[("accountTag/team", "platform")],
                cost_category=[("team", "finops-default")])]
    export = tmp_path / "cur2-tags.parquet"
    pq.write_table(cur_table(rows), export)
    result = imported(db, export)
    assert (result.format, result.added) == ("AWS CUR 2.0", 2)
    acct, own = billing_lines(db)
    assert (own.team, own.env, own.project, own.cost_center) == ("vision", "prod", "llm", None)
    assert acct.team == "platform"


def gcp(cost: float, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "billing_account_id": "01A2B3-C4D5E6-F7A8B9",
        "service": {"id": "6F81-5844-456A", "description": "Compute Engine"},
        "sku": {"id": "2E27-4F75-95CD", "description": "A2 Instance Core running in Americas"},
        "usage_start_time": "2026-05-01 00:00:00 UTC",
        "usage_end_time": "2026-05-01 01:00:00 UTC",
        "project": {"id": "ml-prod", "number": "123456789012", "name": "ML prod",
                    "labels": [{"key": "team", "value": "platform"},
                               {"key": "env", "value": "prod"}]},
        "labels": [{"key": "team", "value": "vision"}],
        "location": {"location": "us-central1", "country": "US", "region": "us-central1",
                     "zone": "us-central1-a"},
        "resource": {"name": "trainer-1", "global_name": GCE},
        "cost": cost, "currency": "USD", "currency_conversion_rate": 1.0,
        "usage": {"amount": 3600.0, "unit": "seconds"},
        "credits": [], "invoice": {"month": "202605"}, "cost_type": "regular",
    }
    out.update(extra)
    return out


GCP_ROWS = [
    # $10 of cores: sustained use -$2 lowers the rate; a CUD -$5 and a promotion -$1 are
    # credits of their own
    gcp(10.0, credits=[
        {"name": "Sustained usage discount", "amount": -2.0, "full_name": "",
         "id": "x1", "type": "SUSTAINED_USAGE_DISCOUNT"},
        {"name": "Committed use discount: CPU", "amount": -5.0, "full_name": "",
         "id": "x2", "type": "COMMITTED_USAGE_DISCOUNT"},
        {"name": "Free trial", "amount": -1.0, "full_name": "", "id": "x3",
         "type": "PROMOTION"}]),
    gcp(0.8, cost_type="tax", resource=None, labels=[], credits=[]),
]
GCP_EXPECTED = [  # (category, billed, effective, team, env) cheapest first
    ("Credit", -5_000_000, -5_000_000, "vision", "prod"),
    ("Credit", -1_000_000, -1_000_000, "vision", "prod"),
    ("Tax", 800_000, 800_000, "platform", "prod"),
    ("Usage", 8_000_000, 8_000_000, "vision", "prod"),
]


def gcp_lines(path: Path) -> list[tuple[Any, ...]]:
    return [(line["charge_category"], line["billed_micros"], line["effective_micros"],
             line["team"], line["env"]) for line in parsed_lines(path)]


def gcp_days(db: Database) -> list[tuple[Any, ...]]:
    """The stored day's sums: the two credits of the same VM are one row."""
    return [(line.charge_category, line.billed_micros, line.effective_micros, line.lines,
             line.team, line.env) for line in billing_lines(db)]


GCP_DAYS = [("Credit", -6_000_000, -6_000_000, 2, "vision", "prod"),
            ("Tax", 800_000, 800_000, 1, "platform", "prod"),
            ("Usage", 8_000_000, 8_000_000, 1, "vision", "prod")]


def test_gcp_export_as_jsonl_folds_rate_credits_and_keeps_the_others_visible(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "gcp_billing_export_v1.json"
    export.write_text("".join(json.dumps(r) + "\n" for r in GCP_ROWS))
    result = imported(db, export)
    assert (result.format, result.added, result.skipped_count) == (
        "Google Cloud billing export", 4, 0)
    assert result.billed_micros == 2_800_000  # 10 - 2 - 5 - 1 + 0.8
    assert gcp_lines(export) == GCP_EXPECTED
    assert gcp_days(db) == GCP_DAYS
    usage = next(line for line in billing_lines(db) if line.charge_category == "Usage")
    assert (usage.resource_id, usage.account, usage.region, usage.provider, usage.source) == (
        GCE, "ml-prod", "us-central1", "gcp", "gcp-export")
    assert imported(db, export).added == 0


def test_an_export_from_before_credit_types_knows_a_sustained_use_discount_by_its_name(
        tmp_path: Path) -> None:
    """Before `credits.type` (and `id`, `full_name`) the schema's credits were a name and an
    amount: the sustained use discount still lowers the VM's rate; any other credit stays a
    credit of its own, as an unknown type does."""
    old = [{"name": "Sustained Usage Discount", "amount": -2.0},
           {"name": "Committed Usage Discount: CPU", "amount": -5.0},
           {"name": "FreeTrial:204-1234", "amount": -1.0}]
    export = tmp_path / "gcp_billing_export_2019.json"
    export.write_text(json.dumps(gcp(10.0, credits=old)) + "\n"
                      + json.dumps(gcp(1.0, credits=[{"name": " sustained  use discount ",
                                                      "amount": -0.25}])) + "\n")
    assert gcp_lines(export) == [("Credit", -5_000_000, -5_000_000, "vision", "prod"),
                                 ("Credit", -1_000_000, -1_000_000, "vision", "prod"),
                                 ("Usage", 750_000, 750_000, "vision", "prod"),
                                 ("Usage", 8_000_000, 8_000_000, "vision", "prod")]


def test_gcp_export_as_parquet_with_nested_structs_reads_the_same(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "gcp-000000000000.parquet"
    pq.write_table(pa.Table.from_pylist(GCP_ROWS), export)
    imported(db, export)
    assert gcp_lines(export) == GCP_EXPECTED
    assert gcp_days(db) == GCP_DAYS


def test_gcp_export_flattened_to_csv_reads_the_same(db: Database, tmp_path: Path) -> None:
    export = tmp_path / "gcp.csv"
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["billing_account_id", "service_description", "usage_start_time",
                     "usage_end_time", "project_id", "project_labels", "labels",
                     "location_region", "resource_global_name", "cost", "currency",
                     "credits", "cost_type"])
    for r in GCP_ROWS:
        writer.writerow([r["billing_account_id"], r["service"]["description"],
                         r["usage_start_time"], r["usage_end_time"], r["project"]["id"],
                         json.dumps(r["project"]["labels"]), json.dumps(r["labels"]),
                         r["location"]["region"], (r["resource"] or {}).get("global_name"),
                         r["cost"], r["currency"], json.dumps(r["credits"]), r["cost_type"]])
    export.write_text(buf.getvalue())
    imported(db, export)
    assert gcp_lines(export) == GCP_EXPECTED
    assert gcp_days(db) == GCP_DAYS


def test_a_bad_jsonl_line_is_skipped_by_its_line_number_and_strict_refuses(
        db: Database, tmp_path: Path) -> None:
    export = tmp_path / "gcp.jsonl.gz"
    body = (json.dumps(GCP_ROWS[1]) + "\n\n{not json\n"
            + json.dumps(gcp(1.0, credits="oops")) + "\n")
    export.write_bytes(gzip.compress(body.encode()))
    result = imported(db, export)
    assert result.added == 1
    assert result.skipped == [("gcp.jsonl.gz:3", "not a JSON object"),
                              ("gcp.jsonl.gz:4", "credits is not JSON: 'oops'")]
    with pytest.raises(BillingImportError, match=r"gcp.jsonl.gz:3.*--strict"):
        imported(db, export, strict=True)


def test_a_gcp_export_in_another_currency_needs_its_rate(db: Database, tmp_path: Path) -> None:
    export = tmp_path / "gcp.jsonl"
    export.write_text(json.dumps(gcp(10.0, currency="EUR")) + "\n")
    with pytest.raises(BillingImportError, match=r"billed in EUR.*--rate EUR="):
        imported(db, export)
    from decimal import Decimal

    assert imported(db, export, rates={"EUR": Decimal("1.1")}).billed_micros == 11_000_000


def test_the_cli_names_what_it_imported(tmp_path: Path, cli_store: Database,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from costguard.cli import app

    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", "[]")
    export = tmp_path / "gcp.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in GCP_ROWS))
    done = CliRunner().invoke(app, ["billing", "import", str(export)])
    assert done.exit_code == 0, done.output
    assert "Google Cloud billing export: 4 line(s) imported" in done.output
    doc = json.loads(CliRunner().invoke(app, ["billing", "import", str(export), "--format",
                                              "json"]).output)
    assert (doc["format"], doc["focus_version"], doc["duplicates"]) == (
        "Google Cloud billing export", None, 4)


def test_a_file_of_none_of_the_three_names_what_each_needs(db: Database,
                                                           tmp_path: Path) -> None:
    export = tmp_path / "x.csv"
    export.write_text("a,b\n1,2\n")
    with pytest.raises(BillingImportError, match=r"an AWS CUR needs line_item_unblended_cost"):
        imported(db, export)
