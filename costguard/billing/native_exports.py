"""Native cloud billing exports, read as FOCUS lines: AWS CUR 2.0 (and legacy CUR) and the
Google Cloud billing export to BigQuery.

Each native row becomes one or more rows keyed by the FOCUS column names the importer reads
(`billing._line`), so every check, attribution rule and summary applies to them alike.

AWS Cost and Usage Report (CUR 2.0 from Data Exports: snake-case columns, `resource_tags`
and `product` as maps, tags also in the `tags` map; legacy CUR: `lineItem/UnblendedCost`,
`resourceTags/user:team`, read under the CUR 2.0 names, or delivered for Athena with
`resource_tags_user_team` columns: `_cur_tags`). BilledCost is `line_item_unblended_cost`
(its sum is the invoice); EffectiveCost follows AWS's amortised-cost rule (Well-Architected
CUR query library): Savings-Plan-covered usage at `savings_plan_savings_plan_effective_cost`,
RI usage at `reservation_effective_cost`, the Savings Plan negation and upfront fee at 0, a
recurring commitment fee at its unused part. ChargeCategory from `line_item_line_item_type`.

Google Cloud billing export (standard or detailed usage cost, exported from BigQuery as
JSONL or Parquet with its nested fields, or as CSV from a query that flattened them to
`service_description` / `service.description`). BilledCost is `cost` plus the rate
reductions among its `credits` (sustained use, negotiated discounts, subscription benefits);
every other credit (committed use, promotions, free tier, ...) becomes its own Credit line,
so credits stay visible and a CUD-covered VM is not learned at $0/h (its commitment fee is
billed on separate SKUs). ResourceId is `resource.global_name` (detailed export), labels are
the resource's, over its tags, over its project's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from costguard.billing.errors import BillingImportError, decimal_of
from costguard.billing.lines import fold_schemes, user_tag_key
from costguard.costs.attribution import flat_key
from costguard.limited_json import JsonRefused, parse_json

Converter = Callable[[dict[str, Any]], list[dict[str, Any]]]

CUR_REQUIRED = ("line_item_unblended_cost", "line_item_usage_start_date",
                "line_item_usage_end_date")
GCP_REQUIRED = ("cost", "usage_start_time", "usage_end_time")
# line_item_line_item_type -> FOCUS ChargeCategory; another type reads as an Adjustment
_CUR_CATEGORY = {
    "Usage": "Usage", "DiscountedUsage": "Usage", "SavingsPlanCoveredUsage": "Usage",
    "SavingsPlanNegation": "Usage", "Tax": "Tax", "Credit": "Credit", "Refund": "Credit",
    "EdpDiscount": "Credit", "BundledDiscount": "Credit", "PrivateRateDiscount": "Credit",
    "RiVolumeDiscount": "Credit", "DistributorDiscount": "Credit", "Fee": "Purchase",
    "RIFee": "Purchase", "SavingsPlanRecurringFee": "Purchase",
    "SavingsPlanUpfrontFee": "Purchase",
}
_GCP_CATEGORY = {"regular": "Usage", "tax": "Tax", "adjustment": "Adjustment",
                 "rounding error": "Adjustment", "rounding_error": "Adjustment"}
# credits.type values that lower the usage's own rate, with no fee billed elsewhere
_GCP_RATE_CREDITS = frozenset({"SUSTAINED_USAGE_DISCOUNT", "DISCOUNT", "SUBSCRIPTION_BENEFIT"})
_ZERO = Decimal(0)
# a sustained use discount's credit name where the export has no credits.type
_SUD_NAMES = ("sustained usage discount", "sustained use discount")
# a legacy CUR's tag columns as its Athena (Parquet) delivery names them, lower snake case:
# `resourceTags/user:CostCenter` -> resource_tags_user_cost_center, `aws:createdBy` ->
# resource_tags_aws_created_by
_FLAT_TAGS = "resource_tags_"


def detect(columns: Sequence[str]) -> tuple[str, Converter] | None:
    """The native export whose columns these are, and its converter; None if neither."""
    have = set(columns)
    names = {c: legacy_cur_name(c) for c in columns if "/" in c}
    if names and all(c in names.values() for c in CUR_REQUIRED):
        legacy = _tag_columns([names.get(c, c) for c in columns])
        return "AWS CUR (legacy)", lambda row: _cur(
            {names.get(k, k): v for k, v in row.items()}, legacy)
    if all(c in have for c in CUR_REQUIRED):
        tagged = _tag_columns(columns)
        athena = any(c.startswith(_FLAT_TAGS) for c in columns)
        return ("AWS CUR (legacy, Athena)" if athena else "AWS CUR 2.0",
                lambda row: _cur(row, tagged))
    if all(c in have for c in GCP_REQUIRED):
        return "Google Cloud billing export", _gcp
    return None


def legacy_cur_name(column: str) -> str:
    """A legacy CUR column under its CUR 2.0 name, as AWS converts it (`lineItem/
    UnblendedCost` -> line_item_unblended_cost, `reservation/ReservationARN` ->
    reservation_reservation_a_r_n); resource tags and cost categories keep their key
    (`resource_tags/user:team`)."""
    group, _, name = column.partition("/")
    if group == "resourceTags":
        return f"resource_tags/{name}"
    if group == "costCategory":
        return f"cost_category/{name}"
    return f"{flat_key(group)}_{flat_key(name)}"


def _dec(value: object, where: str) -> Decimal:
    if value is None or value == "":
        return _ZERO
    return decimal_of(value, where)


def _map(value: object) -> dict[str, Any]:
    """A map column: a dict, a list of (key, value) pairs (Parquet maps), or JSON text."""
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            value = parse_json(value, max_depth=8)
        except JsonRefused:
            return {}
        return _map(value) if not isinstance(value, str) else {}
    if isinstance(value, (list, tuple)):
        out: dict[str, Any] = {}
        for item in value:
            if isinstance(item, Mapping) and "key" in item:
                out[str(item["key"])] = item.get("value")
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                out[str(item[0])] = item[1]
        return out
    return {}


# a CUR's columns that hold one tag each: (column, the tag's key: bare for the resource's
# own, `costCategory/NAME` for a cost category)
_TagColumns = list[tuple[str, str]]


def _tag_columns(columns: Sequence[str]) -> _TagColumns:
    """The columns of a CUR that hold one tag each, found once per file (a CUR has a
    hundred columns and more, and millions of lines): legacy CUR's `resource_tags/KEY`
    and `cost_category/NAME` (as `legacy_cur_name` renames them) and the Athena
    delivery's `resource_tags_KEY`."""
    found: _TagColumns = []
    for column in columns:
        if column.startswith("resource_tags/"):
            found.append((column, user_tag_key(column.split("/", 1)[1])))
        elif column.startswith(_FLAT_TAGS):
            found.append((column, user_tag_key(column[len(_FLAT_TAGS):])))
        elif column.startswith("cost_category/"):
            found.append((column, f"costCategory/{column.split('/', 1)[1]}"))
    return found


def _cur_tags(row: Mapping[str, Any], tag_columns: _TagColumns) -> dict[str, Any]:
    """A CUR line's tags from every place a CUR writes them: the resource's own, bare
    (CUR 2.0's `resource_tags` map, legacy CUR's `resourceTags/user:team` columns, and the
    `resource_tags_user_team` columns of a legacy CUR delivered for Athena as Parquet),
    over the prefixed schemes (`lines.fold_schemes`) of CUR 2.0's `tags` map: the
    resource's, its account's (`accountTag/`), its cost categories' (`costCategory/`, also
    the `cost_category` map and legacy `costCategory/` columns). `userAttribute/` keys
    describe an IAM Identity Center user, not the resource: they fill no bare key. An
    empty tag is no tag: it hides no other source's."""
    tags = {f"costCategory/{k}": v for k, v in _map(row.get("cost_category")).items()}
    tags.update(_map(row.get("tags")))
    tags.update({user_tag_key(k): v for k, v in _map(row.get("resource_tags")).items()})
    for column, key in tag_columns:
        value = row.get(column)
        if value not in (None, ""):
            tags[key] = value
    return fold_schemes({k: v for k, v in tags.items() if v not in (None, "")})


def _cur_effective(row: Mapping[str, Any], kind: str, unblended: Decimal) -> Decimal:
    def num(column: str) -> Decimal:
        return _dec(row.get(column), column)

    if kind == "SavingsPlanCoveredUsage":
        return num("savings_plan_savings_plan_effective_cost")
    if kind == "DiscountedUsage":
        return num("reservation_effective_cost")
    if kind in ("SavingsPlanNegation", "SavingsPlanUpfrontFee"):
        return _ZERO
    if kind == "SavingsPlanRecurringFee" and row.get("savings_plan_total_commitment_to_date"):
        return num("savings_plan_total_commitment_to_date") - num(
            "savings_plan_used_commitment")
    if kind == "RIFee" and row.get("reservation_unused_recurring_fee") is not None:
        return num("reservation_unused_amortized_upfront_fee_for_billing_period") + num(
            "reservation_unused_recurring_fee")
    if kind == "Fee" and row.get("reservation_reservation_a_r_n"):
        return _ZERO  # an RI's upfront fee: amortised into its covered usage
    return unblended


def _cur(row: dict[str, Any], tag_columns: _TagColumns) -> list[dict[str, Any]]:
    kind = str(row.get("line_item_line_item_type") or "Usage").strip()
    raw = row.get("line_item_unblended_cost")
    unblended = _dec(raw, "line_item_unblended_cost")
    product = _map(row.get("product"))
    tags = _cur_tags(row, tag_columns)
    region = (row.get("product_region_code") or row.get("product_region")
              or product.get("region_code")
              or product.get("region") or _region_of_zone(row.get("line_item_availability_zone")))
    return [{
        "BilledCost": raw if raw not in (None, "") else None,
        "EffectiveCost": _cur_effective(row, kind, unblended),
        "ChargeCategory": _CUR_CATEGORY.get(kind, "Adjustment"),
        "ChargePeriodStart": row.get("line_item_usage_start_date"),
        "ChargePeriodEnd": row.get("line_item_usage_end_date"),
        "ResourceId": row.get("line_item_resource_id"),
        "ServiceName": (row.get("product_product_name") or product.get("product_name")
                        or row.get("product_servicecode") or row.get("line_item_product_code")),
        "ProviderName": "AWS",
        "SubAccountId": row.get("line_item_usage_account_id"),
        "BillingAccountId": row.get("bill_payer_account_id"),
        "RegionId": region,
        "BillingCurrency": row.get("line_item_currency_code"),
        "Tags": tags,
    }]


def _gcp_credit_type(credit: Mapping[str, Any]) -> str:
    """A credit's `type`; an export older than that field (credits were a name and an
    amount) says what a sustained use discount is by its name alone."""
    kind = str(credit.get("type") or "").strip().upper()
    if kind:
        return kind
    name = " ".join(str(credit.get("name") or "").lower().split())
    return "SUSTAINED_USAGE_DISCOUNT" if name.startswith(_SUD_NAMES) else ""


def _region_of_zone(zone: object) -> str | None:
    text = str(zone or "").strip()
    return text[:-1] if text and text[-1].isalpha() and text[-2:-1].isdigit() else None


def _field(row: Mapping[str, Any], *path: str) -> Any:
    """A nested field (`service`, `description`) as JSONL/Parquet nest it, or as a query
    flattened it for CSV (`service.description` or `service_description`)."""
    value: Any = row.get(path[0])
    if len(path) > 1:
        if isinstance(value, str) and value.startswith("{"):
            try:
                value = parse_json(value, max_depth=8)
            except JsonRefused:
                value = None
        if isinstance(value, Mapping):
            return value.get(path[1])
        dotted = row.get(".".join(path))
        return dotted if dotted is not None else row.get("_".join(path))
    return value


def _list(value: object, where: str) -> list[Mapping[str, Any]]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value
        try:
            value = parse_json(text, max_depth=8)
        except JsonRefused:
            raise BillingImportError(f"{where} is not JSON: {text[:60]!r}") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, Mapping) for v in value):
        raise BillingImportError(f"{where} must be a list of records")
    return list(value)


def _gcp(row: dict[str, Any]) -> list[dict[str, Any]]:
    cost = _dec(row.get("cost"), "cost")
    folded, credits = cost, []
    for credit in _list(_field(row, "credits"), "credits"):
        amount = _dec(credit.get("amount"), "credits.amount")
        if _gcp_credit_type(credit) in _GCP_RATE_CREDITS:
            folded += amount
        elif amount:
            credits.append((amount, str(credit.get("type") or credit.get("name") or "")))
    labels: dict[str, Any] = {}
    for source in (_field(row, "project", "labels"), _field(row, "tags"), _field(row, "labels")):
        labels.update({k: v for k, v in _map(source).items()})
    resource = _field(row, "resource", "global_name") or _field(row, "resource", "name")
    base = {
        "ChargePeriodStart": row.get("usage_start_time"),
        "ChargePeriodEnd": row.get("usage_end_time"),
        "ResourceId": resource,
        "ServiceName": _field(row, "service", "description"),
        "ProviderName": "Google Cloud",
        "SubAccountId": _field(row, "project", "id"),
        "BillingAccountId": row.get("billing_account_id"),
        "RegionId": _field(row, "location", "region") or _field(row, "location", "location"),
        "BillingCurrency": row.get("currency"),
        "Tags": labels,
    }
    kind = str(row.get("cost_type") or "regular").strip().lower()
    category = _GCP_CATEGORY.get(kind, "Adjustment")
    raw = row.get("cost")
    out = [{**base, "BilledCost": folded if raw not in (None, "") else None,
            "EffectiveCost": folded, "ChargeCategory": category}]
    out += [{**base, "BilledCost": amount, "EffectiveCost": amount, "ChargeCategory": "Credit",
             "ChargeDescription": kind_name} for amount, kind_name in credits]
    return out
