"""Fixtures the cost tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from costguard.store.db import Database


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A migrated store on each backend (`db_url`: SQLite and PostgreSQL), disposed after."""
    database = Database(db_url)
    yield database
    database.dispose()
