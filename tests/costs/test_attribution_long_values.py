"""A tag value may be 256 characters (AWS, Azure), and a bill's or an annotation's any
length; the store keeps 128 for a team, a project or a cost centre, 64 for an env. On
PostgreSQL a longer value was a DataError that failed the cycle's whole accrual, every
cycle, over one instance's tag. Attribution keeps what the columns hold; both stores."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import SQLModel, select
from typer.testing import CliRunner

from costguard.costs.accrual import accrue
from costguard.costs.attribution import (
    DEFAULT_DIMENSIONS,
    VALUE_CHARS,
    VALUE_CHARS_OF,
    Attributor,
)
from costguard.costs.pricing import PriceCatalog
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.tables import CostIntervalRow
from tests.costs.fleet import T0, instance

LONG = {"team": "t" * 256, "project": "p" * 256, "env": "e" * 256, "cost-center": "c" * 300}


def test_every_column_a_dimension_is_stored_in_holds_what_attribution_keeps() -> None:
    import costguard.store.bill_tables
    import costguard.store.rollup_tables
    import costguard.store.tables  # noqa: F401 (the tables register their columns)

    seen = 0
    for table in SQLModel.metadata.tables.values():
        for dim in DEFAULT_DIMENSIONS:
            column = table.columns.get(dim.replace("-", "_"))
            if column is None:
                continue
            seen += 1
            length = getattr(column.type, "length", None)
            keeps = VALUE_CHARS_OF.get(dim, VALUE_CHARS)
            assert length is None or length >= keeps, (table.name, column.name, length)
    assert seen >= 12  # intervals, two rollups, billed lines (4 each), actions, alerts


def test_long_tag_values_are_kept_to_their_columns_and_accrual_goes_on(db: Database) -> None:
    fleet = [instance("i-long", "m5.large").model_copy(update={"tags": LONG}),
             instance("i-plain", "m5.large", team="vision")]
    with db.session() as s:
        record_inventory(s, "sim", fleet, T0, complete=True)
    with db.session() as s:
        stats = accrue(s, T0 + timedelta(minutes=20), PriceCatalog().price_of(), Attributor())
    assert stats.intervals == 2
    with db.session() as s:
        got = {r.instance_id: r for r in s.exec(select(CostIntervalRow))}
    long = got["i-long"]
    assert (long.team, long.project, long.env, long.cost_center) == (
        "t" * 128, "p" * 128, "e" * 64, "c" * 128)
    assert got["i-plain"].team == "vision"


@pytest.mark.parametrize("reader", ["columns", "lines"])
def test_a_bill_line_with_long_text_is_imported_whole(db_url: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     reader: str) -> None:
    """A tag, and text stored as written (a log group's ARN reaches 560 characters; an ARN
    may be 2,048), by the column reader and by the line reader (which a line in another
    currency hands the file to)."""
    from costguard.cli import app
    from costguard.store.bill_tables import BillingCostRow
    from tests.costs.test_focus_real_exports import row, write_csv

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", db_url)
    Database(db_url).dispose()
    arn = "arn:aws:logs:us-east-1:200000000011:log-group:/" + "g" * 512 + ":*"
    lines = [row(BilledCost="7", EffectiveCost="7", Tags=json.dumps({"team": "t" * 200}),
                 ResourceId=arn, ServiceName="S" * 200, RegionId="r" * 100,
                 ChargeClass="c" * 40),
             row(BilledCost="3", EffectiveCost="3", Tags=json.dumps({"team": "vision"}),
                 ResourceId=arn + "-other")]  # differs past the cut: still its own line
    rate = []
    if reader == "lines":
        lines.append(row(BilledCost="1", EffectiveCost="1", BillingCurrency="EUR"))
        rate = ["--rate", "EUR=1.25"]
    path = write_csv(tmp_path / "bill.csv", lines)
    done = CliRunner().invoke(app, ["billing", "import", str(path), *rate])
    assert done.exit_code == 0, done.output
    db = Database(db_url)
    with db.session() as s:
        stored = sorted(s.exec(select(BillingCostRow)), key=lambda r: -r.billed_micros)
    db.dispose()
    assert [r.billed_micros for r in stored][:2] == [7_000_000, 3_000_000]
    first = stored[0]
    assert (first.team, first.resource_id, first.service, first.region, first.charge_class) == (
        "t" * 128, arn[:512], "S" * 128, "r" * 64, "c" * 32)
    assert stored[1].resource_id == arn[:512] and stored[1].team == "vision"
