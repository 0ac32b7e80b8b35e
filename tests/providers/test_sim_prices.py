"""The simulated cloud prices its instance types from the shipped AWS on-demand table."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from costguard.clock import ManualClock
from costguard.costs.pricing import table_price
from costguard.demo.sim import SimProvider
from costguard.demo.sim_fleet import SIM_TYPES
from costguard.demo.sim_prices import SPOT_DISCOUNT, sim_price
from costguard.demo.sim_settings import SimSettings
from costguard.model import Instance, InstanceState, Lifecycle
from costguard.providers.aws.pricing import OnDemandTable

T0 = datetime(2026, 11, 18, tzinfo=UTC)


def _sim(itype: str, region: str, lifecycle: Lifecycle = Lifecycle.ON_DEMAND) -> Instance:
    return Instance(provider="sim", account="111111111111", region=region, instance_id="i-1",
                    instance_type=itype, state=InstanceState.RUNNING, lifecycle=lifecycle,
                    launch_time=T0, observed_at=T0)


@pytest.mark.parametrize("region", SimSettings().regions)
def test_every_sim_type_is_in_the_aws_table_for_every_default_region(region: str) -> None:
    aws = OnDemandTable()
    for itype in SIM_TYPES:
        found = aws.lookup(region, itype)
        assert found is not None, (region, itype)
        quote = sim_price(_sim(itype, region))
        assert quote is not None and quote.usd_per_hour == found.usd_per_hour
        assert quote.source.startswith("aws on-demand table")


def test_spot_is_the_sim_discount_of_the_table_price() -> None:
    on_demand = sim_price(_sim("p5.48xlarge", "eu-west-1"))
    spot = sim_price(_sim("p5.48xlarge", "eu-west-1", Lifecycle.SPOT))
    assert on_demand is not None and spot is not None
    assert spot.usd_per_hour == round(on_demand.usd_per_hour * SPOT_DISCOUNT, 4)
    assert "spot at 35%" in spot.source


def test_a_region_outside_the_table_is_priced_as_us_east_1_and_an_unknown_type_not_at_all(
) -> None:
    elsewhere = sim_price(_sim("g5.xlarge", "mars-north-1"))
    home = sim_price(_sim("g5.xlarge", "us-east-1"))
    assert elsewhere is not None and home is not None
    assert elsewhere.usd_per_hour == home.usd_per_hour == 1.006
    assert sim_price(_sim("x9.huge", "us-east-1")) is None


def test_reports_without_a_provider_price_sim_instances_as_the_provider_does() -> None:
    provider = SimProvider(SimSettings(instances=1), ManualClock(T0))
    for itype in SIM_TYPES:
        for lifecycle in Lifecycle:
            inst = _sim(itype, "eu-west-1", lifecycle)
            assert table_price(inst) == provider.price(inst)
