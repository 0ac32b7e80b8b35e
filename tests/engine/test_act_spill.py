"""The act stage writes a policy's journal entries, findings and alerts as they pile up
(`actions.bulk.Rows.spill`), not all at the block's end: the same rows, fewer held at once."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from sqlmodel import Session, col, select

from costguard.actions import bulk
from costguard.clock import ManualClock
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow, FindingRow
from tests.engine.conftest import EngineFactory, run_for
from tests.fakes.cloud import ScriptedCloud, always


def test_a_policys_rows_are_written_as_they_pile_up(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bulk, "SPILL_AT", 2)
    held_at_write: list[int] = []
    write_held = bulk.Rows._write_held

    def counted(self: bulk.Rows, s: Session) -> None:
        held_at_write.append(len(self.journal) + len(self.findings) + len(self.alerts))
        write_held(self, s)

    monkeypatch.setattr(bulk.Rows, "_write_held", counted)
    for n in range(5):
        cloud.add(f"i-{n}", always("no_process"))
    engine = make_engine(mode="enforce", cap=10)
    run_for(engine, clock, timedelta(hours=1))
    assert max(held_at_write) <= 3  # spilled at 2 (one finding adds at most one more row)
    with db.session() as s:
        notified = Counter(a.instance_id for a in s.exec(select(AlertRow))
                           if a.kind == "idle-warning")
        journal = [(r.instance_id, r.action) for r in s.exec(
            select(ActionJournalRow).order_by(col(ActionJournalRow.id)))]
        findings = len(list(s.exec(select(FindingRow))))
    assert notified == {f"i-{n}": 1 for n in range(5)}  # each warned once, none lost
    assert sorted(i for i, a in journal if a == "notify") == [f"i-{n}" for n in range(5)]
    assert findings >= 5
