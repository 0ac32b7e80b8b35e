"""`report --compare billed` compares like with like: the usage of the instances costguard
watches (matched by ResourceId, at EffectiveCost) beside their estimates; every other line
of the bill on its own row, never as a gap. Figures worked out by hand below."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from rich.console import Console

from costguard.billing.importer import import_focus
from costguard.costs.attribution import Attributor
from costguard.report.queries import spend
from costguard.report.render import to_json, to_table
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from tests.costs.fleet import T0, add_interval, instance

HEADER = ("BilledCost,EffectiveCost,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,"
          "ResourceId,ServiceName,ProviderName,Tags\n")
GCE = "//compute.googleapis.com/projects/ml-prod/zones/us-central1-a/instances/{}"


def line(billed: str, effective: str, resource: str, *, team: str = "",
         category: str = "Usage", service: str = "Amazon Elastic Compute Cloud",
         provider: str = "Amazon Web Services") -> str:
    tags = json.dumps({"team": team} if team else {}).replace('"', '""')
    return (f'{billed},{effective},{category},{T0:%Y-%m-%dT%H:%M:%SZ},'
            f'{T0 + timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ},{resource},{service},{provider},'
            f'"{tags}"\n')


@pytest.fixture
def billed_fleet(db: Database, tmp_path: Path) -> Database:
    """i-r (research, AWS) and 4711 (vision, GCP) are watched: estimated $80 and $30."""
    watched = [instance("i-r", "p4d.24xlarge", team="research").model_copy(
                   update={"provider": "aws"}),
               instance("4711", "a2-highgpu-1g", team="vision").model_copy(
                   update={"provider": "gcp"})]
    with db.session() as s:
        record_inventory(s, "aws", watched[:1], T0, complete=True)
        record_inventory(s, "gcp", watched[1:], T0, complete=True)
        add_interval(s, "i-r", T0, 4, 20.0, team="research", provider="aws")
        add_interval(s, "4711", T0, 10, 3.0, team="vision", provider="gcp",
                     itype="a2-highgpu-1g", region="us-central1", gpus=1)
    export = tmp_path / "bill.csv"
    export.write_text(
        HEADER
        # i-r under a Savings Plan: billed $100 twice, $60 each effective
        + line("100", "60", "arn:aws:ec2:us-east-1:1:instance/i-r", team="research") * 2
        # 4711 bills as cores and RAM lines, $25 + $9.50 effective
        + line("30", "25", GCE.format(4711), team="vision", service="Compute Engine",
               provider="Google Cloud")
        + line("10", "9.5", GCE.format(4711), team="vision", service="Compute Engine",
               provider="Google Cloud")
        + line("7.25", "7.25", "vol-1", team="research", service="Amazon Elastic Block Store")
        + line("40", "40", "i-unseen", team="vision")
        + line("5", "5", "", category="Tax", service="")
        + line("-3", "-3", "", category="Credit", service="")
        + line("9", "9", "/subscriptions/x/vm1", provider="Microsoft",
               service="Virtual Machines"))
    with db.session() as s:
        import_focus(s, export, Attributor(), T0 + timedelta(days=1))
    return db


def test_watched_instances_are_compared_at_effective_cost_and_the_rest_has_its_own_rows(
        billed_fleet: Database) -> None:
    with billed_fleet.session() as s:
        rep = spend(s, ["team"], T0, T0 + timedelta(days=1), compare="billed")
    assert {r.key[0]: (r.cost_micros, r.billed_micros) for r in rep.rows} == {
        "research": (80_000_000, 120_000_000), "vision": (30_000_000, 34_500_000)}
    assert rep.billed_not_compared == (
        ("aws", "instances costguard does not watch", 40_000_000),
        ("azure", "Virtual Machines", 9_000_000),
        ("aws", "Amazon Elastic Block Store", 7_250_000),
        ("aws", "Tax", 5_000_000),
        ("aws", "Credit", -3_000_000))
    # 200 + 40 + 7.25 + 40 + 5 - 3 + 9: the invoice's sum of BilledCost
    assert rep.bill_total_micros == 298_250_000
    doc = json.loads(to_json(rep))
    assert doc["bill_total_usd"] == 298.25
    assert doc["total"]["billed_usd"] == 154.5 and doc["total"]["gap_usd"] == 44.5
    assert doc["billed_not_compared"][-1] == {"provider": "aws", "what": "Credit",
                                              "billed_usd": -3.0}


def test_by_instance_keys_a_bill_line_by_the_instance_it_names(billed_fleet: Database) -> None:
    with billed_fleet.session() as s:
        rep = spend(s, ["instance"], T0, T0 + timedelta(days=1), compare="billed")
        one = spend(s, ["team"], T0, T0 + timedelta(days=1), {"instance": "i-r"},
                    compare="billed")
    assert {r.key[0]: r.billed_micros for r in rep.rows} == {"i-r": 120_000_000,
                                                              "4711": 34_500_000}
    assert one.total.billed_micros == 120_000_000 and one.billed_not_compared == ()


def test_a_team_filter_narrows_the_not_compared_rows_too(billed_fleet: Database) -> None:
    with billed_fleet.session() as s:
        rep = spend(s, ["team"], T0, T0 + timedelta(days=1), {"team": "vision"},
                    compare="billed")
    assert rep.total.billed_micros == 34_500_000
    assert rep.billed_not_compared == (("aws", "instances costguard does not watch",
                                        40_000_000),)


def test_the_table_names_the_whole_bill_and_what_was_not_compared(
        billed_fleet: Database) -> None:
    with billed_fleet.session() as s:
        rep = spend(s, ["team"], T0, T0 + timedelta(days=1), compare="billed")
    console = Console(width=80, record=True, color_system=None)
    to_table(rep, console)
    text = console.export_text()
    assert "Whole bill in the period: $298.25 (BilledCost)" in text
    assert "$40.00  aws    instances costguard does not watch" in text
    assert "-$3.00  aws    Credit" in text


def test_a_bill_that_names_no_watched_instance_says_so(db: Database, tmp_path: Path) -> None:
    from costguard.report.run import _table

    export = tmp_path / "bill.csv"
    export.write_text(HEADER + line("7.25", "7.25", "vol-1", service="Amazon S3"))
    with db.session() as s:
        import_focus(s, export, Attributor(), T0 + timedelta(days=1))
        rep = spend(s, ["team"], T0, T0 + timedelta(days=1), compare="billed")
    console = Console(width=100, record=True, color_system=None)
    _table(rep, None, console)
    text = console.export_text()
    assert "No line of the bill names an instance costguard watches" in text
    assert "No bills imported" not in text


def test_a_window_that_cuts_a_day_counts_its_share_of_the_days_charges(
        db: Database, tmp_path: Path) -> None:
    """Bills are kept as day sums: the day's lines of vol-1 ($10 at T0, $20 ten hours
    later) are one charge over [T0, T0+11h); a window over half of that counts half."""
    later = line("20", "20", "vol-1", service="Amazon Elastic Block Store").replace(
        f"{T0:%Y-%m-%dT%H:%M:%SZ},{T0 + timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ}",
        f"{T0 + timedelta(hours=10):%Y-%m-%dT%H:%M:%SZ},"
        f"{T0 + timedelta(hours=11):%Y-%m-%dT%H:%M:%SZ}")
    export = tmp_path / "bill.csv"
    export.write_text(HEADER + line("10", "10", "vol-1", service="Amazon Elastic Block Store")
                      + later)
    with db.session() as s:
        import_focus(s, export, Attributor(), T0 + timedelta(days=1))
        whole = spend(s, ["team"], T0, T0 + timedelta(days=1), compare="billed")
        half = spend(s, ["team"], T0, T0 + timedelta(hours=5, minutes=30), compare="billed")
        before = spend(s, ["team"], T0 - timedelta(days=1), T0, compare="billed")
    assert whole.bill_total_micros == 30_000_000
    assert half.bill_total_micros == 15_000_000
    assert half.billed_not_compared == (("aws", "Amazon Elastic Block Store", 15_000_000),)
    assert before.bill_total_micros == 0
