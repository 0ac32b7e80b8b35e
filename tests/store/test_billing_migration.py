"""Revision 0013 moves bills from a row per line (billing_lines) to a row per day's sums
(billing_costs): lines imported before it are summed into their days, and an export
imported before it adds nothing when imported again (its lines' old keys are kept)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from sqlalchemy import text

from costguard.billing.focus_files import open_focus
from costguard.billing.importer import import_focus
from costguard.costs.attribution import Attributor
from costguard.store.db import Database, _alembic_config, make_engine
from tests.costs.fleet import billing_lines

NOW = datetime(2026, 11, 2, tzinfo=UTC)
EXPORT = ("BilledCost,EffectiveCost,ChargePeriodStart,ChargePeriodEnd,ResourceId,"
          "ServiceName,ProviderName,ChargeCategory\n"
          "10,8,2026-11-01T00:00:00Z,2026-11-01T01:00:00Z,i-a,EC2,AWS,Usage\n"
          "10,8,2026-11-01T00:00:00Z,2026-11-01T01:00:00Z,i-a,EC2,AWS,Usage\n"
          "12,9,2026-11-01T01:00:00Z,2026-11-01T02:00:00Z,i-a,EC2,AWS,Usage\n")
LATER = "30,30,2026-11-01T02:00:00Z,2026-11-01T03:00:00Z,i-a,EC2,AWS,Usage\n"


def _old_key(row: dict[str, str], occurrence: int) -> str:
    """The key revisions before 0013 stored: SHA-256 of the row as JSON and its count."""
    content = json.dumps({k: str(v) for k, v in sorted(row.items())}, sort_keys=True)
    return hashlib.sha256(f"{content}#{occurrence}".encode()).hexdigest()


def _store_at_0012_with_lines(url: str, export: Path) -> None:
    """A store as 0012 left it, holding `export` as the importer of then stored it."""
    engine = make_engine(url)
    try:
        command.upgrade(_alembic_config(engine), "0012")
        rows = list(open_focus(export).rows)
        with engine.begin() as conn:
            for n, row in enumerate(rows):
                occurrence = sum(1 for earlier in rows[:n + 1] if earlier == row)
                conn.execute(text(
                    "INSERT INTO billing_lines (source, line_key, imported_at, charge_start, "
                    "charge_end, provider, resource_id, service, billed_micros, "
                    "effective_micros, charge_category, currency) VALUES ('focus', :key, "
                    ":now, :start, :end, 'aws', :res, 'EC2', :billed, :eff, 'Usage', 'USD')"),
                    {"key": _old_key(row, occurrence), "now": NOW,
                     "start": datetime.fromisoformat(row["ChargePeriodStart"]),
                     "end": datetime.fromisoformat(row["ChargePeriodEnd"]),
                     "res": row["ResourceId"], "billed": int(row["BilledCost"]) * 10**6,
                     "eff": int(row["EffectiveCost"]) * 10**6})
    finally:
        engine.dispose()


def test_lines_imported_before_0013_are_summed_into_their_day_and_not_imported_twice(
        db_url: str, tmp_path: Path) -> None:
    export = tmp_path / "focus.csv"
    export.write_text(EXPORT)
    _store_at_0012_with_lines(db_url, export)
    db = Database(db_url)  # migrates to head
    try:
        (day,) = billing_lines(db)
        assert (day.billed_micros, day.effective_micros, day.lines) == (32_000_000,
                                                                       25_000_000, 3)
        assert (day.charge_start, day.charge_end) == (datetime(2026, 11, 1, tzinfo=UTC),
                                                      datetime(2026, 11, 1, 2, tzinfo=UTC))
        export.write_text(EXPORT + LATER)  # the same export, a line longer
        with db.session() as s:
            result = import_focus(s, export, Attributor(), NOW)
        assert (result.read, result.added, result.duplicates) == (4, 1, 3)
        (day,) = billing_lines(db)
        assert (day.billed_micros, day.lines) == (62_000_000, 4)
        with db.session() as s:  # once known by their new keys, the old ones are not needed
            again = import_focus(s, export, Attributor(), NOW)
        assert (again.added, again.duplicates) == (0, 4)
    finally:
        db.dispose()


def test_a_store_without_old_lines_has_no_old_keys_and_imports_once(
        db_url: str, tmp_path: Path) -> None:
    export = tmp_path / "focus.csv"
    export.write_text(EXPORT)
    db = Database(db_url)
    try:
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM billing_legacy_keys")).scalar() == 0
        with db.session() as s:
            first = import_focus(s, export, Attributor(), NOW)
        with db.session() as s:
            again = import_focus(s, export, Attributor(), NOW)
        assert (first.added, again.added, again.duplicates) == (3, 0, 3)
        (day,) = billing_lines(db)
        assert (day.billed_micros, day.lines) == (32_000_000, 3)
    finally:
        db.dispose()
