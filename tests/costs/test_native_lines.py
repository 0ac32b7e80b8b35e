"""A native export's row as the FOCUS line the importer reads, whole: every column the
converter fills, for the shapes the clouds document.

CUR columns and their meaning: the CUR 2.0 table dictionary and "Understanding your
reservations" (docs.aws.amazon.com/cur/latest/userguide/): a DiscountedUsage line costs
`reservation_effective_cost` (amortised upfront plus recurring fee for that usage), an
RIFee line's unused part is `reservation_unused_amortized_upfront_fee_for_billing_period`
plus `reservation_unused_recurring_fee`, an RI's upfront Fee is spread over its usage (0
here). Google Cloud columns: "Structure of Detailed data export" (cloud.google.com/billing/
docs/how-to/export-data-bigquery-tables/detailed-usage). Amounts are worked out by hand.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from costguard.billing.importer import BillingImportError
from costguard.billing.native_exports import detect, legacy_cur_name

CUR2 = ["line_item_unblended_cost", "line_item_usage_start_date", "line_item_usage_end_date"]


def convert(row: dict[str, Any]) -> list[dict[str, Any]]:
    found = detect(list(row))
    assert found is not None
    return found[1](row)


def cur_row(**kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "bill_payer_account_id": "100000000001", "line_item_usage_account_id": "200000000011",
        "line_item_line_item_type": "Usage", "line_item_usage_start_date": "2026-05-01T00:00Z",
        "line_item_usage_end_date": "2026-05-01T01:00Z", "line_item_resource_id": "i-0abc",
        "line_item_unblended_cost": "3.06", "line_item_currency_code": "EUR",
        "product_product_name": "Amazon Elastic Compute Cloud",
        "product_region_code": "eu-west-1", "product": "", "resource_tags": "",
    }
    row.update(kw)
    return row


def test_a_cur_line_fills_every_focus_column_it_has() -> None:
    (line,) = convert(cur_row(resource_tags=json.dumps({"user_team": "vision"})))
    assert line == {
        "BilledCost": "3.06", "EffectiveCost": Decimal("3.06"), "ChargeCategory": "Usage",
        "ChargePeriodStart": "2026-05-01T00:00Z", "ChargePeriodEnd": "2026-05-01T01:00Z",
        "ResourceId": "i-0abc", "ServiceName": "Amazon Elastic Compute Cloud",
        "ProviderName": "AWS", "SubAccountId": "200000000011",
        "BillingAccountId": "100000000001", "RegionId": "eu-west-1",
        "BillingCurrency": "EUR", "Tags": {"team": "vision"}}


@pytest.mark.parametrize(("columns", "region"), [
    ({"product_region_code": "eu-west-1"}, "eu-west-1"),
    ({"product_region_code": "", "product_region": "us-east-2"}, "us-east-2"),  # Athena CUR
    ({"product_region_code": "", "product": json.dumps({"region_code": "ap-south-1"})},
     "ap-south-1"),
    ({"product_region_code": "", "product": [("region", "sa-east-1")]}, "sa-east-1"),
    # no region column at all: the zone the usage ran in says it
    ({"product_region_code": "", "line_item_availability_zone": "us-west-2b"}, "us-west-2"),
    ({"product_region_code": "", "line_item_availability_zone": "use1-az1"}, None),
    ({"product_region_code": ""}, None),
])
def test_a_cur_line_finds_its_region_where_the_export_put_it(
        columns: dict[str, Any], region: str | None) -> None:
    (line,) = convert(cur_row(**columns))
    assert line["RegionId"] == region


@pytest.mark.parametrize(("columns", "service"), [
    ({}, "Amazon Elastic Compute Cloud"),
    ({"product_product_name": "", "product": json.dumps({"product_name": "Amazon S3"})},
     "Amazon S3"),
    ({"product_product_name": "", "product_servicecode": "AmazonEC2"}, "AmazonEC2"),
    ({"product_product_name": "", "line_item_product_code": "AmazonSageMaker"},
     "AmazonSageMaker"),
])
def test_a_cur_line_names_its_service_from_the_most_readable_column(
        columns: dict[str, Any], service: str) -> None:
    (line,) = convert(cur_row(**columns))
    assert line["ServiceName"] == service


@pytest.mark.parametrize(("kind", "columns", "billed", "effective", "category"), [
    # a Reserved Instance's usage: billed nothing, costs its amortised upfront and recurring
    # fee for the hour
    ("DiscountedUsage", {"line_item_unblended_cost": "0",
                         "reservation_effective_cost": "1.2"}, "0", "1.2", "Usage"),
    # the RI's hourly fee: billed in full, of which the unused part is what the hour cost
    # beyond its usage
    ("RIFee", {"line_item_unblended_cost": "0.85",
               "reservation_unused_amortized_upfront_fee_for_billing_period": "0.25",
               "reservation_unused_recurring_fee": "0.10"}, "0.85", "0.35", "Purchase"),
    # an RIFee line without the unused columns (an older export) is its billed amount
    ("RIFee", {"line_item_unblended_cost": "0.85"}, "0.85", "0.85", "Purchase"),
    # an RI's upfront payment: amortised into its covered usage, so 0 here
    ("Fee", {"line_item_unblended_cost": "1000",
             "reservation_reservation_a_r_n": "arn:aws:ec2:us-east-1:1:reserved-instances/x"},
     "1000", "0", "Purchase"),
    # any other fee (support, a marketplace subscription) is what it billed
    ("Fee", {"line_item_unblended_cost": "29"}, "29", "29", "Purchase"),
    ("SavingsPlanUpfrontFee", {"line_item_unblended_cost": "8760"}, "8760", "0", "Purchase"),
    # a plan's recurring fee without its commitment columns is what it billed
    ("SavingsPlanRecurringFee", {"line_item_unblended_cost": "12"}, "12", "12", "Purchase"),
    # a plan's recurring fee, 9.5 of its 12 used: 2.5 unused
    ("SavingsPlanRecurringFee", {"line_item_unblended_cost": "12",
                                 "savings_plan_total_commitment_to_date": "12",
                                 "savings_plan_used_commitment": "9.5"}, "12", "2.5",
     "Purchase"),
    ("Refund", {"line_item_unblended_cost": "-4"}, "-4", "-4", "Credit"),
    ("Tax", {"line_item_unblended_cost": "0.6"}, "0.6", "0.6", "Tax"),
    # no type at all reads as usage; a type AWS adds later is kept as an adjustment
    ("", {"line_item_unblended_cost": "1"}, "1", "1", "Usage"),
    ("SomethingNew", {"line_item_unblended_cost": "1"}, "1", "1", "Adjustment"),
])
def test_cur_amortises_reservations_and_plans_as_aws_does(
        kind: str, columns: dict[str, Any], billed: str, effective: str,
        category: str) -> None:
    (line,) = convert(cur_row(line_item_line_item_type=kind, **columns))
    assert (line["BilledCost"], line["EffectiveCost"], line["ChargeCategory"]) == (
        billed, Decimal(effective), category)


def test_a_cur_line_without_a_cost_is_left_for_the_importer_to_refuse() -> None:
    (line,) = convert(cur_row(line_item_unblended_cost=""))
    assert (line["BilledCost"], line["EffectiveCost"]) == (None, Decimal(0))
    with pytest.raises(BillingImportError, match="reservation_effective_cost"):
        convert(cur_row(line_item_line_item_type="DiscountedUsage",
                        reservation_effective_cost="n/a"))


def test_legacy_cur_columns_are_read_under_cur2_names() -> None:
    assert legacy_cur_name("lineItem/UnblendedCost") == "line_item_unblended_cost"
    # AWS's own name (CUR 2.0, and a legacy CUR for Athena): every capital split
    assert legacy_cur_name("reservation/ReservationARN") == "reservation_reservation_a_r_n"
    assert legacy_cur_name("savingsPlan/SavingsPlanARN") == "savings_plan_savings_plan_a_r_n"
    assert legacy_cur_name("reservation/EffectiveCost") == "reservation_effective_cost"
    assert legacy_cur_name("resourceTags/user:Team") == "resource_tags/user:Team"
    assert legacy_cur_name("costCategory/Business Unit") == "cost_category/Business Unit"
    legacy = {"lineItem/UnblendedCost": "2", "lineItem/UsageStartDate": "2026-05-01T00:00Z",
              "lineItem/UsageEndDate": "2026-05-01T01:00Z", "lineItem/LineItemType": "Usage",
              "bill/PayerAccountId": "100000000001", "product/region": "us-east-1",
              "resourceTags/user:Team": "vision", "costCategory/Business Unit": "ml"}
    found = detect(list(legacy))
    assert found is not None and found[0] == "AWS CUR (legacy)"
    (line,) = found[1](legacy)
    assert (line["BilledCost"], line["BillingAccountId"], line["RegionId"], line["Tags"]) == (
        "2", "100000000001", "us-east-1",
        {"Team": "vision", "Business Unit": "ml", "costCategory/Business Unit": "ml"})


def test_cur_tag_keys_keep_their_slashes_and_an_empty_column_hides_no_other() -> None:
    """EKS tags its nodes `kubernetes.io/cluster/NAME`; a key holds slashes after its
    scheme's. An empty tag column (most lines lack most tags) is skipped, not the end."""
    legacy = {"lineItem/UnblendedCost": "2", "lineItem/UsageStartDate": "2026-05-01T00:00Z",
              "lineItem/UsageEndDate": "2026-05-01T01:00Z",
              "resourceTags/user:team": "", "resourceTags/aws:eks:cluster-name": "train",
              "resourceTags/kubernetes.io/cluster/train": "owned",
              "costCategory/a/b": "x"}
    (line,) = convert(legacy)
    assert line["Tags"] == {"aws:eks:cluster-name": "train",
                            "kubernetes.io/cluster/train": "owned", "a/b": "x",
                            "costCategory/a/b": "x"}
    athena = cur_row(resource_tags_user_team=None, resource_tags_user_env="prod")
    (line,) = convert(athena)
    assert line["Tags"] == {"env": "prod"}


def test_an_empty_cur_tag_hides_no_other_source() -> None:
    (line,) = convert(cur_row(resource_tags=json.dumps({"user_team": "", "user_env": "dev"}),
                              tags=json.dumps({"accountTag/team": "platform",
                                               "accountTag/env": "prod"})))
    assert (line["Tags"]["team"], line["Tags"]["env"]) == ("platform", "dev")


def test_cur2_cost_categories_are_tags_below_every_other() -> None:
    (line,) = convert(cur_row(cost_category=json.dumps({"team": "finops", "env": "x"}),
                              resource_tags=json.dumps({"user_env": "prod"})))
    assert (line["Tags"]["team"], line["Tags"]["env"]) == ("finops", "prod")


def test_a_legacy_cur_amortises_an_ri_upfront_fee_as_cur2_does() -> None:
    """Read under a name CUR 2.0 does not have (reservation_reservation_arn), the RI's ARN
    was missed and its upfront fee counted in full beside the usage it is amortised into."""
    fee = {"lineItem/UnblendedCost": "1000", "lineItem/UsageStartDate": "2026-05-01T00:00Z",
           "lineItem/UsageEndDate": "2026-05-01T01:00Z", "lineItem/LineItemType": "Fee",
           "reservation/ReservationARN": "arn:aws:ec2:us-east-1:1:reserved-instances/x"}
    (line,) = convert(fee)
    assert (line["BilledCost"], line["EffectiveCost"]) == ("1000", Decimal(0))


def test_detect_tells_the_three_apart_and_names_none_of_them() -> None:
    assert detect([*CUR2])[0] == "AWS CUR 2.0"  # type: ignore[index]
    assert detect([*CUR2, "resource_tags_user_team"])[0] == (  # type: ignore[index]
        "AWS CUR (legacy, Athena)")
    assert detect(["cost", "usage_start_time", "usage_end_time"])[0] == (  # type: ignore[index]
        "Google Cloud billing export")
    assert detect(["cost", "usage_start_time"]) is None
    assert detect(CUR2[:2]) is None


def gcp_row(**kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "billing_account_id": "01A2B3-C4D5E6-F7A8B9",
        "service": {"id": "6F81-5844-456A", "description": "Compute Engine"},
        "usage_start_time": "2026-05-01 00:00:00 UTC",
        "usage_end_time": "2026-05-01 01:00:00 UTC",
        "project": {"id": "ml-prod", "labels": [{"key": "team", "value": "platform"}]},
        "labels": [{"key": "env", "value": "prod"}],
        "location": {"location": "us-central1-a", "region": "us-central1"},
        "resource": {"name": "trainer-1", "global_name": "//compute.googleapis.com/x/4711"},
        "cost": 10.0, "currency": "JPY", "credits": [], "cost_type": "regular",
    }
    row.update(kw)
    return row


def test_a_google_line_fills_every_focus_column_it_has() -> None:
    (line, credit) = convert(gcp_row(credits=[
        {"name": "Committed use discount: CPU", "amount": -5.0, "type": "COMMITTED_USAGE_DISCOUNT"},
        # a type in any case; the type decides, not the name
        {"name": "Spend-based discount", "amount": -2.0, "type": "sustained_usage_discount"}]))
    base = {"ChargePeriodStart": "2026-05-01 00:00:00 UTC",
            "ChargePeriodEnd": "2026-05-01 01:00:00 UTC",
            "ResourceId": "//compute.googleapis.com/x/4711", "ServiceName": "Compute Engine",
            "ProviderName": "Google Cloud", "SubAccountId": "ml-prod",
            "BillingAccountId": "01A2B3-C4D5E6-F7A8B9", "RegionId": "us-central1",
            "BillingCurrency": "JPY", "Tags": {"team": "platform", "env": "prod"}}
    assert line == {**base, "BilledCost": Decimal(8), "EffectiveCost": Decimal(8),
                    "ChargeCategory": "Usage"}
    assert credit == {**base, "BilledCost": Decimal(-5), "EffectiveCost": Decimal(-5),
                      "ChargeCategory": "Credit", "ChargeDescription": "COMMITTED_USAGE_DISCOUNT"}


@pytest.mark.parametrize(("kw", "field", "value"), [
    # the standard export has no resource.global_name; a flattening query's CSV columns
    ({"resource": {"name": "trainer-1"}}, "ResourceId", "trainer-1"),
    ({"location": {"location": "us"}}, "RegionId", "us"),
    ({"location": None, "location.region": "europe-west4"}, "RegionId", "europe-west4"),
    ({"service": None, "service_description": "Cloud Storage"}, "ServiceName",
     "Cloud Storage"),
    ({"service": json.dumps({"description": "BigQuery"})}, "ServiceName", "BigQuery"),
    ({"service": "{not json"}, "ServiceName", None),
    ({"cost_type": "tax"}, "ChargeCategory", "Tax"),
    ({"cost_type": " Rounding Error "}, "ChargeCategory", "Adjustment"),
    ({"cost_type": None}, "ChargeCategory", "Usage"),
    ({"cost_type": "something_new"}, "ChargeCategory", "Adjustment"),
    ({"cost": ""}, "BilledCost", None),
    # labels: the resource's over its tags over its project's
    ({"tags": [{"key": "team", "value": "nlp", "inherited": True}]}, "Tags",
     {"team": "nlp", "env": "prod"}),
    ({"labels": json.dumps([{"key": "team", "value": "vision"}])}, "Tags",
     {"team": "vision"}),
])
def test_a_google_line_reads_each_shape_the_export_comes_in(
        kw: dict[str, Any], field: str, value: Any) -> None:
    line = convert(gcp_row(**kw))[0]
    assert line[field] == value


def test_a_google_credit_without_a_type_is_named_by_its_name() -> None:
    lines = convert(gcp_row(credits=[{"name": "FreeTrial:204-1234", "amount": -1.0},
                                     {"amount": -0.5}, {"name": "Zero", "amount": 0}]))
    assert [(line["BilledCost"], line.get("ChargeDescription")) for line in lines] == [
        (Decimal(10), None), (Decimal(-1), "FreeTrial:204-1234"), (Decimal("-0.5"), "")]


def test_a_google_credit_that_is_not_a_number_is_refused_by_its_field() -> None:
    with pytest.raises(BillingImportError, match=r"credits\.amount"):
        convert(gcp_row(credits=[{"name": "x", "amount": "lots"}]))
    with pytest.raises(BillingImportError, match=r"^cost"):
        convert(gcp_row(cost="ten"))
    with pytest.raises(BillingImportError, match="credits is not JSON"):
        convert(gcp_row(credits="[{"))
    with pytest.raises(BillingImportError, match="credits must be a list of records"):
        convert(gcp_row(credits="[1, 2]"))
    # an empty cell (a flattening query's CSV) is no credit, not a bad line
    assert len(convert(gcp_row(credits=""))) == 1
