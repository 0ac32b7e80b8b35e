"""Hourly prices: the shipped on-demand table, Price List API refreshes, and spot history.

moto implements neither `pricing:GetProducts` nor real spot prices, so the parsers here are
tested with recorded-shaped payloads (a botocore Stubber for GetProducts only).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from costguard.clock import utc
from costguard.model import as_of_date
from costguard.providers.aws.boundary import aws_call

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_pricing import PricingClient

_PRICE_FILE = "data/ec2_gpu_prices.json"


@dataclass(frozen=True)
class TablePrice:
    usd_per_hour: float
    source: str
    as_of: date | None = None
    fallback: bool = True  # the shipped table, not the cloud's answer


class OnDemandTable:
    """On-demand USD/h by (region, type) from the shipped table (a dated snapshot; prices
    fetched by `costguard prices refresh` are kept in the store, see costs/price_book.py)."""

    def __init__(self) -> None:
        doc = _shipped_doc()
        self.as_of: str = doc["as_of"]
        self._shipped: dict[tuple[str, str], float] = {
            (region, itype): float(usd)
            for region, rows in doc["prices"].items()
            for itype, usd in rows.items()
        }
        self._estimated = {
            (region, itype) for region, types in doc["estimates"].items() for itype in types
        }

    def lookup(self, region: str, instance_type: str) -> TablePrice | None:
        key = (region, instance_type)
        usd = self._shipped.get(key)
        if usd is None:
            return None
        note = " (estimate)" if key in self._estimated else ""
        return TablePrice(usd, f"aws on-demand table {self.as_of}{note}",
                          as_of=as_of_date(self.as_of))

    def priced(self) -> set[tuple[str, str]]:
        """(region, instance type) of every shipped price."""
        return set(self._shipped)

    def known_types(self) -> set[str]:
        return {itype for _, itype in self._shipped}

    def regions(self) -> set[str]:
        return {region for region, _ in self._shipped}


@cache
def _shipped_doc() -> dict[str, Any]:
    text = resources.files("costguard.providers.aws").joinpath(_PRICE_FILE).read_text()
    doc: dict[str, Any] = json.loads(text)
    return doc


def parse_price_list(
    price_list: Iterable[str], published: list[datetime] | None = None,
) -> dict[tuple[str, str], float]:
    """(regionCode, instanceType) -> on-demand USD/h from GetProducts `PriceList` entries.

    Each entry is a JSON document: `product.attributes` names the type and region, and
    `terms.OnDemand.<offer>.priceDimensions.<dim>.pricePerUnit.USD` holds the hourly rate.
    Entries without an hourly USD on-demand rate (reservations, zero-priced BYOL rows) are
    skipped. Each entry's `publicationDate` is appended to `published` when given.
    """
    out: dict[tuple[str, str], float] = {}
    for entry in price_list:
        doc = json.loads(entry) if isinstance(entry, str) else entry
        if published is not None and doc.get("publicationDate"):
            published.append(utc(datetime.fromisoformat(doc["publicationDate"])))
        attrs = doc.get("product", {}).get("attributes", {})
        itype, region = attrs.get("instanceType"), attrs.get("regionCode")
        if not itype or not region:
            continue
        for offer in doc.get("terms", {}).get("OnDemand", {}).values():
            for dim in offer.get("priceDimensions", {}).values():
                if dim.get("unit") not in ("Hrs", "Hours", "Hour"):
                    continue
                usd = float(dim.get("pricePerUnit", {}).get("USD", "0") or 0)
                if usd > 0:
                    out[(region, itype)] = usd
    return out


def fetch_on_demand_prices(
    pricing: PricingClient, regions: Sequence[str], instance_types: Sequence[str]
) -> tuple[dict[tuple[str, str], float], datetime | None]:
    """Ask the Price List API for Linux, shared-tenancy, no-license on-demand rates; with
    the newest publication date of the entries read."""
    found: dict[tuple[str, str], float] = {}
    published: list[datetime] = []
    for region in regions:
        for itype in instance_types:
            filters = [
                ("instanceType", itype),
                ("regionCode", region),
                ("operatingSystem", "Linux"),
                ("tenancy", "Shared"),
                ("preInstalledSw", "NA"),
                ("capacitystatus", "Used"),
                ("licenseModel", "No License required"),
            ]
            token: str | None = None
            with aws_call(f"pricing/{region}/{itype}"):
                while True:
                    kwargs: dict[str, Any] = {
                        "ServiceCode": "AmazonEC2",
                        "Filters": [
                            {"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in filters
                        ],
                        "FormatVersion": "aws_v1",
                        "MaxResults": 100,
                    }
                    if token:
                        kwargs["NextToken"] = token
                    page = pricing.get_products(**kwargs)
                    found.update(parse_price_list(page.get("PriceList", []), published))
                    token = page.get("NextToken")
                    if not token:
                        break
    return found, max(published, default=None)


def latest_spot_prices(
    ec2: EC2Client, instance_types: Sequence[str], product: str, now: datetime, scope: str
) -> dict[tuple[str, str], float]:
    """(instance type, AZ) -> current spot USD/h: the newest history entry per pair."""
    newest: dict[tuple[str, str], tuple[datetime, float]] = {}
    token: str | None = None
    with aws_call(scope):
        while True:
            kwargs: dict[str, Any] = {
                "InstanceTypes": list(instance_types),
                "ProductDescriptions": [product, f"{product} (Amazon VPC)"],
                # StartTime=now returns the price in force now for every type/AZ.
                "StartTime": now,
                "EndTime": now,
                "MaxResults": 1000,
            }
            if token:
                kwargs["NextToken"] = token
            page = ec2.describe_spot_price_history(**kwargs)
            for row in page.get("SpotPriceHistory", []):
                key = (row["InstanceType"], row["AvailabilityZone"])
                when = utc(row["Timestamp"])
                if key not in newest or when > newest[key][0]:
                    newest[key] = (when, float(row["SpotPrice"]))
            token = page.get("NextToken") or None
            if not token:
                break
    return {key: usd for key, (_, usd) in newest.items()}
