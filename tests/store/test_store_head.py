"""The store's fast open: the head revision constant is Alembic's head, and it is trusted only
when the database really is there."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlmodel import SQLModel

from costguard.errors import StoreError
from costguard.store import head_snapshot, sqlite_head
from costguard.store.db import (
    HEAD_REVISION,
    Database,
    _alembic_config,
    current_revision,
    head_revision,
    load_all_tables,
    make_engine,
)


def test_head_revision_constant_is_alembics_head() -> None:
    assert head_revision() == HEAD_REVISION


def test_a_store_behind_head_is_still_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    db = Database(url)
    command.downgrade(_alembic_config(db.engine), "0011")  # the last migrations never ran
    db.dispose()
    with pytest.raises(StoreError, match="not up to date"):
        Database(url, migrate=False)
    again = Database(url)
    assert current_revision(again.engine) == HEAD_REVISION
    with again.engine.connect() as conn:
        conn.execute(text("SELECT provider, instance_id, settings_key, judged_at, efficiency "
                          "FROM efficiency_verdicts"))
    again.dispose()


def _master(path: Path) -> list[tuple[str, str, str, str | None]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                            "ORDER BY rowid").fetchall()
    finally:
        conn.close()


def test_the_sqlite_snapshot_is_what_the_migrations_make() -> None:
    assert sqlite_head.REVISION == HEAD_REVISION, \
        "run `python -m costguard.store.head_snapshot` after adding a migration"
    assert list(sqlite_head.STATEMENTS) == head_snapshot.migrated_schema(), \
        "run `python -m costguard.store.head_snapshot` after changing a migration"


def test_a_new_sqlite_store_is_the_migrated_one_without_alembic(tmp_path: Path) -> None:
    migrated = make_engine(f"sqlite:///{tmp_path / 'migrated.db'}")
    command.upgrade(_alembic_config(migrated), "head")  # what upgrade() did for every store
    migrated.dispose()
    code = ("import sys; from costguard.store.db import Database; "
            "Database(sys.argv[1]).dispose(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))")
    out = subprocess.run([sys.executable, "-c", code, f"sqlite:///{tmp_path / 'new.db'}"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # made from the snapshot: Alembic was not even imported
    assert _master(tmp_path / "new.db") == _master(tmp_path / "migrated.db")
    new = make_engine(f"sqlite:///{tmp_path / 'new.db'}")
    assert current_revision(new) == HEAD_REVISION
    with new.connect() as conn:  # the models agree too (as test_store checks on PostgreSQL)
        load_all_tables()
        assert compare_metadata(MigrationContext.configure(conn), SQLModel.metadata) == []
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    new.dispose()


def test_a_sqlite_database_with_other_tables_is_left_to_alembic(tmp_path: Path) -> None:
    path = tmp_path / "used.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE accounts (x INTEGER)")  # not ours: Alembic's 0001 fails on it
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="cannot open or migrate"):
        Database(f"sqlite:///{path}")
    names = [row[1] for row in _master(path)]
    assert "instances" not in names  # no snapshot statement ran (Alembic's own table may be)
