"""SpotPrices' own bookkeeping, with the reads replaced: what each type costs in each zone,
what the store keeps of it and what an hour later forgets. The reads themselves (moto) are
in test_aws_prices.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from costguard.clock import ManualClock
from costguard.model import Instance, InstanceState, Lifecycle
from costguard.providers.aws import spot as spot_module
from costguard.providers.aws.spot import SPOT_PRICE_TTL, SpotPrices

START = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
# a scope's history: two types over three zones, one type in one zone
PRICES = {("g5.xlarge", "us-east-1a"): 0.42, ("g5.xlarge", "us-east-1b"): 0.51,
          ("g5.xlarge", "us-east-1c"): 0.47, ("p4d.24xlarge", "us-east-1b"): 9.8,
          ("m5.large", "us-east-1a"): 0.03}


def _instance(itype: str, zone: str | None, account: str = "111111111111") -> Instance:
    return Instance(provider="aws", account=account, region="us-east-1", zone=zone,
                    instance_id=f"i-{itype}-{zone}", instance_type=itype,
                    state=InstanceState.RUNNING, lifecycle=Lifecycle.SPOT,
                    launch_time=START, observed_at=START)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Each read's (scope, types); it answers PRICES' entries for the types asked."""
    asked: list[tuple[str, list[str]]] = []

    def latest(_ec2: Any, types: list[str], _product: str, _now: datetime, scope: str
               ) -> dict[tuple[str, str], float]:
        asked.append((scope, list(types)))
        return {k: v for k, v in PRICES.items() if k[0] in types}

    monkeypatch.setattr(spot_module, "latest_spot_prices", latest)
    return asked


def test_each_type_is_priced_in_its_own_zone_or_at_its_dearest(
        reads: list[tuple[str, list[str]]]) -> None:
    clock = ManualClock(START)
    prices = SpotPrices("Linux/UNIX", clock, lambda account, region: None)
    fleet = [_instance("g5.xlarge", "us-east-1b"), _instance("p4d.24xlarge", None),
             _instance("m5.large", "us-east-1a")]
    prices.prefetch("111111111111", "us-east-1", fleet, START)
    assert prices.lookup(fleet[0]) == 0.51
    assert prices.lookup(_instance("g5.xlarge", None)) == 0.51  # the dearest of three
    assert prices.lookup(_instance("g5.xlarge", "us-east-1c")) == 0.47
    assert prices.lookup(fleet[1]) == 9.8
    assert prices.lookup(fleet[2]) == 0.03
    assert len(reads) == 1
    # a type with no history asks once, then is known to have none
    assert prices.lookup(_instance("g6.xlarge", "us-east-1a")) is None
    assert prices.lookup(_instance("g6.xlarge", "us-east-1a")) is None
    assert [types for _, types in reads] == [["g5.xlarge", "m5.large", "p4d.24xlarge"],
                                             ["g6.xlarge"]]
    # another account's scope is its own
    assert prices.lookup(_instance("g5.xlarge", "us-east-1a", "222222222222")) == 0.42
    assert len(reads) == 3


def test_the_notes_keep_each_types_zones_and_restore_them_in_a_new_process(
        reads: list[tuple[str, list[str]]]) -> None:
    clock = ManualClock(START)
    first = SpotPrices("Linux/UNIX", clock, lambda account, region: None)
    first.prefetch("111111111111", "us-east-1",
                   [_instance("g5.xlarge", "us-east-1a"), _instance("m5.large", None)], START)
    notes = first.notes()
    assert notes == {"111111111111/us-east-1": {
        "g5.xlarge": {"at": START.isoformat(),
                      "usd": {"us-east-1a": 0.42, "us-east-1b": 0.51, "us-east-1c": 0.47}},
        "m5.large": {"at": START.isoformat(), "usd": {"us-east-1a": 0.03}}}}
    clock.advance(timedelta(minutes=40))
    again = SpotPrices("Linux/UNIX", clock, lambda account, region: None)
    again.restore(notes)
    assert again.notes() == notes
    assert again.lookup(_instance("g5.xlarge", None)) == 0.51
    assert len(reads) == 1


def test_an_hour_later_a_types_prices_are_forgotten_and_read_again(
        reads: list[tuple[str, list[str]]]) -> None:
    clock = ManualClock(START)
    prices = SpotPrices("Linux/UNIX", clock, lambda account, region: None)
    prices.prefetch("111111111111", "us-east-1", [_instance("g5.xlarge", "us-east-1a")], START)
    clock.advance(timedelta(minutes=30))
    prices.prefetch("111111111111", "us-east-1", [_instance("m5.large", "us-east-1a")],
                    clock.now())
    clock.advance(SPOT_PRICE_TTL - timedelta(minutes=30))  # g5's read is an hour old
    prices.forget_old(clock.now())
    assert list(prices.notes()["111111111111/us-east-1"]) == ["m5.large"]
    assert prices.lookup(_instance("g5.xlarge", "us-east-1c")) == 0.47  # read again
    assert [types for _, types in reads] == [["g5.xlarge"], ["m5.large"], ["g5.xlarge"]]
