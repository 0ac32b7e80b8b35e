"""A bill is input: text a store cannot hold (NUL in a cell, a NUL or a lone surrogate
escaped in the tags' JSON) skips that line, named, on SQLite and on PostgreSQL, which
refuses NUL in text (an export with one failed the whole import with a DataError)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from costguard.cli import app
from costguard.store.db import Database
from tests.costs.test_focus_real_exports import row, write_csv


@pytest.mark.parametrize("gz", [False, True])
def test_a_line_with_text_no_store_takes_is_skipped_and_named(
        db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool) -> None:
    from costguard.store.bill_tables import BillingCostRow

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", db_url)
    Database(db_url).dispose()
    path = write_csv(tmp_path / ("bill.csv.gz" if gz else "bill.csv"), [
        row(ResourceId="arn:aws:ec2:us-east-1:200000000011:instance/i-\x00x"),
        row(RegionId="us-east-1\x00"),
        row(Tags='{"team": "a\\u0000b"}'),
        row(Tags='{"team": "x\\ud800"}'),
        row(ChargeDescription="a NUL in what is not stored\x00 is read"),
        row(BilledCost="7", EffectiveCost="7", Tags=json.dumps({"team": "vision"})),
    ], gz=gz)
    done = CliRunner().invoke(app, ["billing", "import", str(path), "--format", "json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output[done.output.index("{"):])  # after the no-policies note
    reasons = " | ".join(s["why"] for s in doc["skipped_lines"])
    assert [s["where"].rpartition(":")[2] for s in doc["skipped_lines"]] == [
        "2", "3", "4", "5"], reasons
    assert "ResourceId holds a NUL character" in reasons
    assert "RegionId holds a NUL character" in reasons
    assert "NUL character" in reasons and "unpaired surrogate" in reasons
    db = Database(db_url)
    with db.session() as s:
        billed = s.execute(select(func.sum(BillingCostRow.billed_micros))).scalar_one()
    db.dispose()
    assert billed == 17_000_000  # the two good lines, to the cent
