"""The store's fast open: the head revision constant is Alembic's head, and it is trusted only
when the database really is there."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from costguard.errors import StoreError
from costguard.store.db import HEAD_REVISION, Database, current_revision, head_revision


def test_head_revision_constant_is_alembics_head() -> None:
    assert head_revision() == HEAD_REVISION


def test_a_store_behind_head_is_still_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    db = Database(url)
    with db.engine.begin() as conn:  # pretend the last migration never ran
        conn.execute(text("UPDATE alembic_version SET version_num = '0005'"))
        conn.execute(text("ALTER TABLE gpu_readings DROP COLUMN span_minutes"))
    db.dispose()
    with pytest.raises(StoreError, match="not up to date"):
        Database(url, migrate=False)
    again = Database(url)
    assert current_revision(again.engine) == HEAD_REVISION
    with again.engine.connect() as conn:
        conn.execute(text("SELECT span_minutes FROM gpu_readings"))
    again.dispose()
