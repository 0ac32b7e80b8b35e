"""Prices: the shipped on-demand table, Price List API refresh, spot price history."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, SPOT, ProviderFactory, run_instances
from botocore.stub import ANY, Stubber

from costguard.clock import ManualClock
from costguard.model import Lifecycle
from costguard.providers.aws.pricing import parse_price_list

REQUIRED_FAMILIES = [
    "p3",
    "p4d",
    "p4de",
    "p5",
    "p5e",
    "g4dn",
    "g5",
    "g6",
    "g6e",
    "m5",
    "c5",
    "t3",
    "r5",
]
REQUIRED_REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "ap-southeast-1"]
FLEET_TYPES = [
    "g5.xlarge",
    "g4dn.xlarge",
    "p3.2xlarge",
    "p4d.24xlarge",
    "m5.large",
    "c5.xlarge",
    "t3.medium",
    "r5.2xlarge",
]


def _table() -> dict[str, Any]:
    text = (
        resources.files("costguard.providers.aws").joinpath("data/ec2_gpu_prices.json").read_text()
    )
    doc: dict[str, Any] = json.loads(text)
    return doc


def test_shipped_table_states_its_source_and_date_and_covers_the_required_families() -> None:
    doc = _table()

    assert "aws.amazon.com/ec2/pricing" in doc["source"] and doc["as_of"]
    for region in REQUIRED_REGIONS:
        families = {t.split(".")[0] for t in doc["prices"][region]}
        assert set(REQUIRED_FAMILIES) <= families, region
        assert set(FLEET_TYPES) <= set(doc["prices"][region])
        assert all(usd > 0 for usd in doc["prices"][region].values())


@pytest.mark.usefixtures("moto")
def test_on_demand_price_comes_from_the_table_with_its_source(
    make_provider: ProviderFactory,
) -> None:
    run_instances(itype="p4d.24xlarge")
    run_instances(itype="x2iedn.xlarge")  # not in the table: unknown, not guessed
    provider = make_provider()
    by_type = {i.instance_type: i for i in provider.list_instances().instances}

    quote = provider.price(by_type["p4d.24xlarge"])

    assert quote is not None
    assert quote.usd_per_hour == _table()["prices"][REGION]["p4d.24xlarge"]
    assert quote.source == f"aws on-demand table {_table()['as_of']}"
    assert provider.price(by_type["x2iedn.xlarge"]) is None


@pytest.mark.usefixtures("moto")
def test_spot_price_is_the_newest_history_entry_for_the_zone_fetched_once_an_hour(
    make_provider: ProviderFactory, session: boto3.Session, clock: ManualClock
) -> None:
    spot = run_instances(count=2, **SPOT)
    run_instances(count=1, itype="g4dn.xlarge", **SPOT)
    asked: list[dict[str, Any]] = []
    zone = spot[0]["Placement"]["AvailabilityZone"]
    now = datetime.now(UTC)

    def recorded_history(params: dict[str, Any], **_: Any) -> None:
        asked.append(params)

    def history_rows(parsed: dict[str, Any], **_: Any) -> None:
        # moto's spot history is one fixed fake price; replace it with a recorded-shaped one.
        def row(itype: str, az: str, usd: str, age_h: int) -> dict[str, Any]:
            return {
                "AvailabilityZone": az,
                "InstanceType": itype,
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": usd,
                "Timestamp": now - timedelta(hours=age_h),
            }

        parsed["SpotPriceHistory"] = [
            row("g5.xlarge", zone, "0.3100", 5),
            row("g5.xlarge", zone, "0.4200", 1),
            row("g5.xlarge", "us-east-1z", "0.9900", 1),
            row("g4dn.xlarge", zone, "0.1600", 2),
        ]

    session.events.register("provide-client-params.ec2.DescribeSpotPriceHistory", recorded_history)
    session.events.register("after-call.ec2.DescribeSpotPriceHistory", history_rows)
    provider = make_provider()
    instances = provider.list_instances().instances
    g5 = [i for i in instances if i.instance_type == "g5.xlarge"]

    quotes = [provider.price(i) for i in instances]

    assert {i.lifecycle for i in instances} == {Lifecycle.SPOT}
    assert all(q is not None and q.source == "aws spot price history" for q in quotes)
    assert {provider.price(i).usd_per_hour for i in g5 if i.zone == zone} == {0.42}  # type: ignore[union-attr]
    assert len(asked) == 1 and sorted(asked[0]["InstanceTypes"]) == ["g4dn.xlarge", "g5.xlarge"]
    clock.advance(timedelta(minutes=50))
    provider.list_instances()  # the next cycles within the hour: the prices read serve
    assert {provider.price(i).usd_per_hour for i in g5 if i.zone == zone} == {0.42}  # type: ignore[union-attr]
    assert len(asked) == 1
    run_instances(count=1, itype="p3.2xlarge", **SPOT)  # a type not seen before: asked alone
    p3 = next(i for i in provider.list_instances().instances if i.instance_type == "p3.2xlarge")
    provider.price(p3)
    assert len(asked) == 2 and asked[1]["InstanceTypes"] == ["p3.2xlarge"]
    clock.advance(timedelta(minutes=11))  # an hour since the first read: asked again
    provider.list_instances()
    provider.price(g5[0])
    assert len(asked) == 3 and sorted(asked[2]["InstanceTypes"]) == ["g4dn.xlarge", "g5.xlarge"]


@pytest.mark.usefixtures("moto")
def test_spot_without_history_falls_back_to_on_demand_as_an_upper_bound(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    run_instances(**SPOT)
    session.events.register(
        "after-call.ec2.DescribeSpotPriceHistory",
        lambda parsed, **_: parsed.update(SpotPriceHistory=[]),
    )
    provider = make_provider()
    (inst,) = provider.list_instances().instances

    quote = provider.price(inst)

    assert quote is not None and quote.usd_per_hour == _table()["prices"][REGION]["g5.xlarge"]
    assert "upper bound" in quote.source


def _price_entry(region: str, itype: str, usd: str, unit: str = "Hrs") -> str:
    # Shape of one GetProducts PriceList element (a JSON string), trimmed to the fields read.
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": itype,
                    "regionCode": region,
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                },
                "sku": "ABCDEF",
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    "ABCDEF.JRTCKXETXF": {
                        "offerTermCode": "JRTCKXETXF",
                        "priceDimensions": {
                            "ABCDEF.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": unit,
                                "pricePerUnit": {"USD": usd},
                                "description": f"${usd} per On Demand Linux {itype} Instance Hour",
                            }
                        },
                    }
                }
            },
            "version": "20250501000000",
            "publicationDate": "2025-05-01T00:00:00Z",
        }
    )


RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "pricing" / "aws_get_products.json"


def test_the_recorded_get_products_page_parses_to_the_hourly_on_demand_rate() -> None:
    recorded = json.loads(RECORDED.read_text())
    published: list[datetime] = []

    found = parse_price_list(recorded["PriceList"], published)

    # the EBS product (no instanceType) and the Reserved upfront fee are not hourly rates
    assert found == {("us-east-1", "p5.48xlarge"): 55.04}
    assert max(published) == datetime(2025, 11, 20, 18, 39, 25, tzinfo=UTC)


def test_fetch_list_prices_pages_through_get_products_with_the_linux_shared_filters(
    make_provider: ProviderFactory,
) -> None:
    # moto does not implement pricing:GetProducts, so only this call goes through a Stubber
    # (fed the recorded page, then a page of rows that are no hourly price)
    provider = make_provider()
    pricing = boto3.client("pricing", region_name="us-east-1")
    stub = Stubber(pricing)
    recorded = json.loads(RECORDED.read_text())
    wanted = {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "MaxResults": 100,
              "Filters": ANY}
    stub.add_response("get_products", {**recorded, "NextToken": "page2"}, wanted)
    stub.add_response(
        "get_products",
        {"PriceList": [
            _price_entry("us-east-1", "p5.48xlarge", "0.0000000000"),  # BYOL-style zero row
            _price_entry("us-east-1", "p5.48xlarge", "1.0", unit="Quantity"),
        ]},
        {**wanted, "NextToken": "page2"},
    )
    provider.clients.pricing = lambda: pricing  # type: ignore[method-assign]

    with stub:
        fetched = provider.fetch_list_prices(["us-east-1"], ["p5.48xlarge"])
        stub.assert_no_pending_responses()

    assert fetched.prices == {("us-east-1", "p5.48xlarge", "on-demand"): 55.04}
    assert fetched.source == "aws price list api"
    assert fetched.published == datetime(2025, 11, 20, 18, 39, 25, tzinfo=UTC)


def test_shipped_table_quotes_say_they_are_a_dated_fallback(
    make_provider: ProviderFactory,
) -> None:
    quote = make_provider().price(_instance("p5.48xlarge"))

    assert quote is not None and quote.fallback
    assert quote.as_of is not None and quote.as_of.isoformat()[:7] == _table()["as_of"][:7]


def _instance(itype: str) -> Any:
    from costguard.model import Instance, InstanceState

    now = datetime.now(UTC)
    return Instance(
        provider="aws",
        account="123456789012",
        region=REGION,
        instance_id="i-0abc",
        instance_type=itype,
        state=InstanceState.RUNNING,
        launch_time=now,
        observed_at=now,
    )


def test_a_fractional_gpu_type_is_one_partial_gpu_not_none() -> None:
    from costguard.providers.aws.gpu_types import shipped_gpu_table, spec_from_type_info

    # the GpuInfo shape DescribeInstanceTypes data gives g6f.large: Count 0, a 1/8 L4's memory
    info = {"InstanceType": "g6f.large", "GpuInfo": {"Gpus": [
        {"Name": "L4", "Manufacturer": "NVIDIA", "Count": 0,
         "MemoryInfo": {"SizeInMiB": 2861}}], "TotalGpuMemoryInMiB": 2861}}
    spec = spec_from_type_info(info)
    assert (spec.count, spec.model, spec.memory_mib) == (1, "NVIDIA L4", 2861)
    assert shipped_gpu_table()["g6f.4xlarge"].count == 1
    assert spec_from_type_info({"InstanceType": "m5.large"}).count == 0


@pytest.mark.usefixtures("moto")
def test_a_restart_within_the_hour_reads_spot_prices_from_the_store(
    make_provider: ProviderFactory, session: boto3.Session, clock: ManualClock, tmp_path: Path,
) -> None:
    from costguard.store.db import Database
    from costguard.store.memory import StoreMemory

    spot = run_instances(count=1, **SPOT)
    zone = spot[0]["Placement"]["AvailabilityZone"]
    asked: list[dict[str, Any]] = []
    session.events.register("provide-client-params.ec2.DescribeSpotPriceHistory",
                            lambda params, **_: asked.append(params))

    def history_rows(parsed: dict[str, Any], **_: Any) -> None:
        parsed["SpotPriceHistory"] = [{
            "AvailabilityZone": zone, "InstanceType": "g5.xlarge",
            "ProductDescription": "Linux/UNIX", "SpotPrice": "0.4200",
            "Timestamp": clock.now() - timedelta(minutes=30)}]

    session.events.register("after-call.ec2.DescribeSpotPriceHistory", history_rows)
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    first = make_provider()
    first.attach_memory(StoreMemory(db, "aws", clock))
    g5 = first.list_instances().instances[0]
    assert first.price(g5).usd_per_hour == 0.42  # type: ignore[union-attr]
    first.list_instances()  # the next cycle's listing writes what the last one read
    assert len(asked) == 1

    clock.advance(timedelta(minutes=40))
    again = make_provider()  # restarted 40 minutes after the read: not asked again
    again.attach_memory(StoreMemory(db, "aws", clock))
    g5 = again.list_instances().instances[0]
    assert again.price(g5).usd_per_hour == 0.42  # type: ignore[union-attr]
    assert len(asked) == 1

    clock.advance(timedelta(minutes=25))  # an hour and five minutes since the read
    late = make_provider()
    late.attach_memory(StoreMemory(db, "aws", clock))
    late.price(late.list_instances().instances[0])
    assert len(asked) == 2


@pytest.mark.usefixtures("moto")
def test_the_inventory_reads_each_scopes_spot_prices_once_for_every_type_it_may_price(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    """Read in the inventory's per-scope workers (concurrently), not later one scope after
    another: the spot instances' types (their cost) and the running on-demand ones (what an
    alert says spot would save); a stopped on-demand instance's type is not asked for."""
    run_instances(count=1, **SPOT)  # g5.xlarge, spot
    run_instances(count=1, itype="p4d.24xlarge")  # on-demand, running
    (stopped,) = run_instances(count=1, itype="m5.large")
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[stopped["InstanceId"]])
    run_instances(region="eu-west-1", count=1, itype="g6.xlarge")
    asked: list[tuple[str, list[str]]] = []
    session.events.register(
        "provide-client-params.ec2.DescribeSpotPriceHistory",
        lambda params, model, context, **_: asked.append(
            (context.get("client_region", ""), sorted(params["InstanceTypes"]))))
    provider = make_provider(regions=[REGION, "eu-west-1"])
    instances = provider.list_instances().instances
    assert sorted(types for _, types in asked) == [["g5.xlarge", "p4d.24xlarge"],
                                                    ["g6.xlarge"]]
    for inst in instances:  # pricing them, spot or as spot, asks nothing more
        if inst.instance_id != stopped["InstanceId"]:
            provider.price(inst)
            provider.price(inst.model_copy(update={"lifecycle": Lifecycle.SPOT}))
    assert len(asked) == 2
    odd = next(i for i in instances if i.instance_id == stopped["InstanceId"])
    provider.price(odd.model_copy(update={"lifecycle": Lifecycle.SPOT}))  # still asked lazily
    assert asked[2] == (REGION, ["m5.large"])


@pytest.mark.usefixtures("moto")
def test_a_notice_prices_spot_savings_of_running_instances_only_from_what_was_read(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    """What a notice says spot would save comes from the prices the inventory read; a
    stopped instance saves nothing on spot, and its type is not asked for inside the act
    stage's transaction."""
    from costguard.actions.spot import spot_saving

    run_instances(count=1, itype="p4d.24xlarge")
    (stopped,) = run_instances(count=1, itype="m5.large")
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[stopped["InstanceId"]])
    asked: list[list[str]] = []
    session.events.register(
        "provide-client-params.ec2.DescribeSpotPriceHistory",
        lambda params, **_: asked.append(sorted(params["InstanceTypes"])))
    provider = make_provider()
    by_id = {i.instance_id: i for i in provider.list_instances().instances}
    assert asked == [["p4d.24xlarge"]]
    running = next(i for iid, i in by_id.items() if iid != stopped["InstanceId"])
    saving = spot_saving({"aws": provider}, running)
    assert saving is not None and saving > 0
    assert spot_saving({"aws": provider}, by_id[stopped["InstanceId"]]) is None
    assert asked == [["p4d.24xlarge"]]


# Accelerated types (GPU or Neuron) the shipped table does not price: no list price was
# transcribed for them (older or Graviton GPU families, fractional GPUs, the newest types,
# Trainium2 which AWS sells as Capacity Blocks). They are unpriced until `costguard prices
# refresh` reads the Price List API, never guessed. A type added to the catalog must be
# priced or named here: the test below fails otherwise.
UNPRICED_ACCELERATED = {
    "g3.16xlarge", "g3.4xlarge", "g3.8xlarge", "g3s.xlarge", "g4ad.16xlarge", "g4ad.2xlarge",
    "g4ad.4xlarge", "g4ad.8xlarge", "g4ad.xlarge", "g5g.16xlarge", "g5g.2xlarge",
    "g5g.4xlarge", "g5g.8xlarge", "g5g.metal", "g5g.xlarge", "g6f.2xlarge", "g6f.4xlarge",
    "g6f.large", "g6f.xlarge", "g7.12xlarge", "g7.24xlarge", "g7.2xlarge", "g7.48xlarge",
    "g7.4xlarge", "g7.8xlarge", "g7e.12xlarge", "g7e.24xlarge", "g7e.2xlarge",
    "g7e.48xlarge", "g7e.4xlarge", "g7e.8xlarge", "gr6.4xlarge", "gr6.8xlarge",
    "gr6f.4xlarge", "p2.16xlarge", "p2.8xlarge", "p2.xlarge", "p5.4xlarge",
    "p6-b300.48xlarge", "trn2.3xlarge", "trn2.48xlarge",
}


def test_every_accelerated_type_is_priced_or_named_unpriced() -> None:
    from costguard.providers.aws.gpu_types import shipped_gpu_table

    table = json.loads(resources.files("costguard.providers.aws").joinpath(
        "data/ec2_gpu_prices.json").read_text(encoding="utf-8"))
    priced = set(table["prices"]["us-east-1"])
    accelerated = set(shipped_gpu_table())
    assert accelerated - priced == UNPRICED_ACCELERATED
    # Trainium and Inferentia on sale on demand are priced (trn2: Capacity Blocks only)
    neuron = {t for t in accelerated if t.startswith(("trn", "inf"))}
    assert neuron - priced == {"trn2.3xlarge", "trn2.48xlarge"}
    assert "trn1" in table["source"] and "inf2" in table["source"]
