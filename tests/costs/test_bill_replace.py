"""An export delivered again with restated lines (`billing import --replace`): the days it
covers hold that delivery's lines only, whichever reader reads it, whether its parts come
one by one in the same import, and when the column reader hands the file to the line
reader half-way."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from costguard.billing import focus_columns
from costguard.billing.importer import import_focus
from costguard.billing.line_keys import Replacing
from costguard.billing.store import day_number
from costguard.costs.attribution import Attributor
from costguard.store.db import Database
from tests.costs.fleet import billing_lines

NOW = datetime(2026, 11, 6, tzinfo=UTC)
HEADER = ("BillingAccountId,SubAccountId,ServiceProviderName,ChargePeriodStart,"
          "ChargePeriodEnd,ChargeCategory,BilledCost,EffectiveCost,BillingCurrency,"
          "ServiceName,ResourceId,RegionId,Tags\n")
TAGS = '"{""team"": ""research""}"'


def line(day: int, hour: int, instance: int, cost: str = "3.5") -> str:
    start = f"2026-11-{day:02d}T{hour:02d}:00:00Z"
    end = f"2026-11-{day:02d}T{hour:02d}:59:59Z"
    return (f"1,2,AWS,{start},{end},Usage,{cost},{cost},USD,Amazon Elastic Compute Cloud,"
            f"i-{instance:04x},us-east-1,{TAGS}")


def delivery(days: range, restated: dict[tuple[int, int, int], str] | None = None,
             gone: tuple[int, int, int] | None = None) -> list[str]:
    """Hourly lines of three instances over `days` (`restated`: (day, hour, instance) ->
    the amount it has now; `gone`: a line no longer there)."""
    out = []
    for day in days:
        for hour in range(24):
            for i in range(3):
                if (day, hour, i) != gone:
                    out.append(line(day, hour, i, (restated or {}).get((day, hour, i), "3.5")))
    return out


def write(path: Path, lines: list[str]) -> Path:
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return path


def stored(db: Database) -> list[tuple[Any, ...]]:
    return sorted((r.source, r.charge_start, r.charge_end, r.resource_id, r.team,
                   r.billed_micros, r.effective_micros, r.lines) for r in billing_lines(db))


def load(db: Database, *paths: Path, replacing: Replacing | None = None,
         by_columns: bool = True, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:
        if not by_columns:
            m.setattr(focus_columns, "reads", lambda source: False)
        with db.session() as s:
            for path in paths:
                import_focus(s, path, Attributor(), NOW, replacing=replacing)


# the month-to-date export of Nov 2 to 4, then delivered again covering Nov 3 to 5: a line
# of Nov 3 restated (a discount applied), one of Nov 4 withdrawn, Nov 5 new
FIRST = delivery(range(2, 5))
AGAIN = delivery(range(3, 6), restated={(3, 7, 1): "1.25"}, gone=(4, 9, 2))


def replaced_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """What a store holds that had Nov 2 of the first delivery and all of the second."""
    expected = Database(f"sqlite:///{tmp_path / 'expected.db'}")
    try:
        load(expected, write(tmp_path / "nov2.csv", delivery(range(2, 3))),
             write(tmp_path / "again.csv", AGAIN), monkeypatch=monkeypatch)
        return stored(expected)
    finally:
        expected.dispose()


@pytest.mark.parametrize("by_columns", [True, False], ids=["columns", "lines"])
def test_a_delivery_again_replaces_the_days_it_covers(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        by_columns: bool) -> None:
    first, again = write(tmp_path / "first.csv", FIRST), write(tmp_path / "again.csv", AGAIN)
    load(db, first, by_columns=by_columns, monkeypatch=monkeypatch)
    replacing = Replacing()
    load(db, again, replacing=replacing, by_columns=by_columns, monkeypatch=monkeypatch)
    assert stored(db) == replaced_alike(tmp_path, monkeypatch)
    assert sorted(replacing.days) == [("focus", day_number(date(2026, 11, d)))
                                      for d in (3, 4, 5)]
    assert (replacing.lines, replacing.billed_micros) == (144, 144 * 3_500_000)
    # without --replace the line before its restatement and the withdrawn one still count
    added = Database(f"sqlite:///{tmp_path / 'added.db'}")
    try:
        load(added, first, again, monkeypatch=monkeypatch)
        assert sum(r[5] for r in stored(added)) - sum(r[5] for r in stored(db)) == 7_000_000
    finally:
        added.dispose()


def test_a_deliverys_parts_fill_a_day_together_and_again_alike(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts split mid-day: the second part adds to the day the first emptied; the same
    delivery replaced again stores the same."""
    half = len(AGAIN) // 2 + 7
    parts = (write(tmp_path / "part-1.csv", AGAIN[:half]),
             write(tmp_path / "part-2.csv", AGAIN[half:]))
    load(db, write(tmp_path / "first.csv", FIRST), monkeypatch=monkeypatch)
    load(db, *parts, replacing=Replacing(), monkeypatch=monkeypatch)
    once = stored(db)
    again = Replacing()
    load(db, *parts, replacing=again, monkeypatch=monkeypatch)
    assert stored(db) == once
    assert again.lines == len(AGAIN)  # the day sums it replaced held every line of it
    assert stored(db) == replaced_alike(tmp_path, monkeypatch)


def test_a_file_the_column_reader_hands_over_is_replaced_once(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The column reader empties days, then meets a bad line: its savepoint puts the days
    back, and the line reader empties them again (they are not taken as done)."""
    monkeypatch.setattr(focus_columns, "_BLOCK_BYTES", 4096)  # the bad line's batch is not
    monkeypatch.setattr(focus_columns, "_BATCH_ROWS", 50)  # the first
    bad = [*AGAIN, line(5, 23, 9, cost="ten")]
    load(db, write(tmp_path / "first.csv", FIRST), monkeypatch=monkeypatch)
    replacing = Replacing()
    load(db, write(tmp_path / "bad.csv", bad), replacing=replacing, monkeypatch=monkeypatch)
    assert replacing.lines == 144  # counted once, by the reader that kept its work
    assert len(replacing.days) == 3
    assert stored(db) == replaced_alike(tmp_path, monkeypatch)


def test_the_cli_imports_parts_together_and_says_what_it_replaced(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from costguard.cli import app

    monkeypatch.setenv("COSTGUARD_DATABASE_URL", str(db.engine.url.render_as_string(
        hide_password=False)))
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", "[]")
    runner = CliRunner()
    first = write(tmp_path / "first.csv", FIRST)
    assert runner.invoke(app, ["billing", "import", str(first)]).exit_code == 0
    parts = [write(tmp_path / "part-1.csv", AGAIN[:100]),
             write(tmp_path / "part-2.csv", AGAIN[100:])]
    done = runner.invoke(app, ["billing", "import", *map(str, parts), "--replace"])
    assert done.exit_code == 0, done.output
    assert "part-1.csv: FOCUS 1.2: 100 line(s) imported" in done.output
    assert f"part-2.csv: FOCUS 1.2: {len(AGAIN) - 100} line(s) imported" in done.output
    assert "replaced 3 day(s) an earlier import held: 144 line(s), billed $504.00" in (
        done.output)
    doc = json.loads(runner.invoke(app, ["billing", "import", *map(str, parts), "--replace",
                                         "--format", "json"]).output)
    assert (doc["added"], doc["duplicates"]) == (len(AGAIN), 0)
    assert doc["replaced"] == {"days": 3, "lines_before": len(AGAIN),
                               "billed_usd_before": pytest.approx(len(AGAIN) * 3.5 - 2.25)}
    assert [f["added"] for f in doc["files"]] == [100, len(AGAIN) - 100]
    # without --replace, a delivery already imported adds nothing
    plain = json.loads(runner.invoke(app, ["billing", "import", *map(str, parts), "--format",
                                           "json"]).output)
    assert (plain["added"], plain["duplicates"], plain["replaced"]) == (0, len(AGAIN), None)


def test_a_delivery_with_a_part_that_fails_keeps_nothing_of_it(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """All the files or none: the first part, read by the column reader inside a savepoint,
    is rolled back with the rest when a later part is refused (on SQLite, a savepoint opened
    before the transaction began would have committed it on release)."""
    from costguard.billing.importer import BillingImportError

    load(db, write(tmp_path / "first.csv", FIRST), monkeypatch=monkeypatch)
    before = stored(db)
    part = write(tmp_path / "part-1.csv", AGAIN[:100])
    with pytest.raises(BillingImportError, match=r"missing\.csv"):
        load(db, part, tmp_path / "missing.csv", replacing=Replacing(),
             monkeypatch=monkeypatch)
    assert stored(db) == before
    with pytest.raises(BillingImportError, match=r"missing\.csv"):
        load(db, part, tmp_path / "missing.csv", monkeypatch=monkeypatch)
    assert stored(db) == before
