"""Fixtures the cost tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from costguard.store.db import Database


@pytest.fixture
def cli_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Database:
    """A SQLite store a command run in the test finds through the environment."""
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", url)
    monkeypatch.chdir(tmp_path)
    return Database(url)
