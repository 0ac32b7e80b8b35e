"""`costguard prices show` and `prices refresh` through Typer's CliRunner, on a store."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.costs.price_book import store_list_prices
from costguard.costs.price_commands import prices_app
from costguard.store.db import Database


@pytest.fixture
def db(cli_store: Database) -> Database:
    return cli_store


def test_show_lists_every_known_price_its_age_and_the_one_estimates_use(db: Database) -> None:
    with db.session() as s:
        store_list_prices(s, "aws", {("us-east-1", "p5.48xlarge", "on-demand"): 55.04},
                          "aws price list api", datetime(2026, 11, 20, tzinfo=UTC))
    shown = CliRunner().invoke(prices_app, ["show", "p5.48xlarge", "--json"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.output)
    east = {p["source"]: p for p in doc["prices"] if p["region"] == "us-east-1"}
    fetched = east["aws price list api 2026-11-20"]
    table = next(p for s, p in east.items() if s.startswith("aws on-demand table"))
    assert (fetched["usd_per_hour"], fetched["used"], fetched["fallback"]) == (55.04, True, False)
    assert (table["used"], table["fallback"]) == (False, True)
    # another region still uses the shipped table, and says so
    west = [p for p in doc["prices"] if p["region"] == "us-west-2"]
    assert [p["used"] for p in west] == [True] and west[0]["fallback"]

    text = CliRunner().invoke(prices_app, ["show", "p5.48xlarge", "--region", "us-east-1"])
    assert text.exit_code == 0 and "$55.0400" in text.output and "used" in text.output


def test_show_of_an_unknown_type_says_how_to_fix_it(db: Database) -> None:
    bad = CliRunner().invoke(prices_app, ["show", "p5.48xlargee"])
    assert bad.exit_code == 1
    assert "no price known for 'p5.48xlargee'" in bad.output
    assert "costguard prices refresh --type p5.48xlargee" in bad.output


def test_refresh_in_the_simulated_cloud_says_there_is_no_price_api(
        db: Database, tmp_path: Path) -> None:
    config = tmp_path / "costguard.yaml"
    config.write_text("providers:\n  sim: {}\n")
    ran = CliRunner().invoke(prices_app, ["refresh", "-c", str(config)])
    assert ran.exit_code == 0, ran.output
    assert "No configured provider has a price API" in ran.output
