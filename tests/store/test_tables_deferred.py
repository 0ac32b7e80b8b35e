"""Row models build their pydantic validator on first use, not at import (start-up time), and
validate as before once they do."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from costguard.store.tables import AccountRow, ControlRow


def test_importing_the_tables_builds_no_row_validator() -> None:
    code = ("import costguard.store.tables as t, costguard.store.bill_tables as b, "
            "costguard.store.rollup_tables as r, costguard.alerts.tables as a; "
            "from sqlmodel import SQLModel; "
            "rows = [c for m in (t, b, r, a) for c in vars(m).values() if isinstance(c, type) "
            "and issubclass(c, SQLModel) and c.__module__ == m.__name__]; "
            "print(len(rows), sum(c.__pydantic_complete__ for c in rows))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert int(out[0]) >= 18
    assert out[1] == "0"


def test_a_row_validates_and_dumps_on_first_use() -> None:
    now = datetime(2026, 11, 23, 12, tzinfo=UTC)
    row = AccountRow.model_validate({"provider": "aws", "account_id": "123",
                                     "first_seen": now, "last_seen": now})
    assert row.model_dump() == {"provider": "aws", "account_id": "123", "first_seen": now,
                                "last_seen": now}
    with pytest.raises(ValidationError, match="at most 16 characters"):
        AccountRow.model_validate({"provider": "x" * 17, "account_id": "1",
                                   "first_seen": now, "last_seen": now})
    assert ControlRow(key="k", value="v", updated_at=now).model_dump()["value"] == "v"
