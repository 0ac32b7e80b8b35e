"""Imported bills price volumes, snapshots and addresses: the rate of their recent usage
lines (EffectiveCost over the hours the lines cover), matched by ARN or bare id, preferred
to the list price; too little bill, or lines of something else, leave the list price."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from costguard.costs.attribution import Attributor
from costguard.standing.billed import billed_monthly, resource_ref
from costguard.standing.model import Standing, StandingKind
from costguard.standing.stage import store
from costguard.store.bill_tables import BillingCostRow
from costguard.store.db import Database
from costguard.store.tables import StandingRow

NOW = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.mark.parametrize(("rid", "ref"), [
    ("arn:aws:ec2:us-west-2:561134494941:snapshot/snap-07736b8b99a0a1263",
     "snap-07736b8b99a0a1263"),
    ("arn:aws:ec2:us-west-2:176921218916:elastic-ip/eipalloc-019b29b1", "eipalloc-019b29b1"),
    ("arn:aws:ec2:us-east-1:1:volume/vol-0abc", "vol-0abc"), ("vol-0abc", "vol-0abc"),
    ("i-0abc", None), ("arn:aws:ec2:us-east-1:1:network-interface/eni-0a1", None),
    ("arn:aws:ec2:us-east-1:1:natgateway/nat-0snap-1", None), ("", None), (None, None),
])
def test_resource_ref(rid: str | None, ref: str | None) -> None:
    assert resource_ref(rid) == ref


_KEYS = iter(range(1, 1_000_000))


def _line(rid: str, day: int, micros: int, *, hours: int = 24, category: str = "Usage",
          provider: str = "sim") -> BillingCostRow:
    start = NOW - timedelta(days=day)
    return BillingCostRow(source="focus", day=int(start.timestamp() // 86400),
                          group_key=next(_KEYS),
                          imported_at=NOW, charge_start=start,
                          charge_end=start + timedelta(hours=hours), provider=provider,
                          resource_id=rid, billed_micros=micros, effective_micros=micros,
                          lines=1, charge_category=category)


def test_the_bill_prices_what_it_names(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'b.db'}")
    arn = "arn:aws:ec2:us-east-1:1:snapshot/snap-1"
    with db.session() as s:
        for day in range(1, 11):  # ten days at $0.40 a day: $12.17 a month at 730 h
            s.add(_line(arn, day, 400_000))
        s.add(_line(arn, 60, 9_000_000))  # older than the window: not counted
        s.add(_line(arn, 3, 5_000_000, category="Credit"))  # not usage
        s.add(_line("vol-2", 2, 1_000_000, hours=12))  # half a day: too little bill
        s.add(_line("snap-3", 2, 1_000_000, provider="gcp"))  # another provider's
    with db.session() as s:
        got = billed_monthly(s, "sim", NOW)
    assert set(got) == {"snap-1"}
    usd, hours = got["snap-1"]
    assert hours == 240 and usd == pytest.approx(0.4 / 24 * 730)
    items = [Standing(kind=StandingKind.SNAPSHOT, provider="sim", account="a", region="r",
                      resource_id=rid, state="completed", in_use=False, created_at=NOW,
                      usd_per_month=40.0, price_source="EBS snapshot standard tier",
                      observed_at=NOW) for rid in ("snap-1", "vol-2")]
    store(db, "sim", frozenset({StandingKind.SNAPSHOT}), items, True, NOW, Attributor())
    with db.session() as s:
        billed, listed = s.get(StandingRow, ("sim", "snap-1")), s.get(StandingRow, ("sim", "vol-2"))
    assert billed is not None and listed is not None
    assert billed.usd_per_month == pytest.approx(usd)
    assert billed.price_source == "billed: EffectiveCost of 10 days; list $40.00"
    assert (listed.usd_per_month, listed.price_source) == (40.0, "EBS snapshot standard tier")
    db.dispose()
