"""`actions.bulk` writes what the ORM helpers it replaces in the act stage write:
`Rows.record` is `journal.record`, `Settled.resolve` is `journal.resolve`, `Settled.set_state`
is `store.inventory.set_state`, `Settled.state` moves a stored policy state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlmodel import Session, col, select

from costguard.actions import journal
from costguard.actions.bulk import (
    NewState,
    Rows,
    Settled,
    journal_entry,
    stored_states,
    write_intents,
)
from costguard.model import Instance, InstanceState
from costguard.store.db import Database
from costguard.store.inventory import set_state
from costguard.store.tables import ActionJournalRow, FindingRow, InstanceRow, PolicyStateRow

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _inst(iid: str) -> Instance:
    return Instance(provider="aws", account="1", region="us-east-1", instance_id=iid,
                    instance_type="g5.xlarge", state=InstanceState.RUNNING,
                    launch_time=NOW - timedelta(days=1), observed_at=NOW)


def _entry(iid: str, status: str) -> dict[str, Any]:
    return dict(key=f"p|aws|{iid}|notify|1", cycle_id=7, policy="p", inst=_inst(iid),
                action="notify", dry_run=False, status=status, detail=f"d {iid}",
                usd_per_hour=1.25, now=NOW)


def _journal(s: Session) -> list[tuple[Any, ...]]:
    return [(r.id, r.key, r.cycle_id, r.policy, r.provider, r.instance_id, r.action,
             r.dry_run, r.status, r.detail, r.usd_per_hour, r.intent_at, r.result_at)
            for r in s.exec(select(ActionJournalRow).order_by(col(ActionJournalRow.id)))]


def _instance_row(iid: str) -> InstanceRow:
    return InstanceRow(provider="aws", instance_id=iid, account="1", region="us-east-1",
                       instance_type="g5.xlarge", state="running", lifecycle="on-demand",
                       launch_time=NOW, first_seen=NOW, last_seen=NOW,
                       state_changed_at=NOW - timedelta(hours=1))


def test_rows_and_settled_write_what_the_orm_helpers_write(db_url: str) -> None:
    db = Database(db_url)
    try:
        # the ORM helpers, then the bulk ones, on the same store: same rows but the ids
        with db.session() as s:
            for iid in ("i-1", "i-2"):
                journal.record(s, **_entry(iid, "done"))
            first = journal.write_intent(s, key="p|aws|i-1|stop|1", cycle_id=7, policy="p",
                                         inst=_inst("i-1"), action="stop", dry_run=False,
                                         usd_per_hour=1.0, now=NOW).id or 0
            s.add(_instance_row("i-1"))
            s.add(PolicyStateRow(policy="p", provider="aws", instance_id="i-1",
                                 state="warned", since=NOW, deadline=NOW))
        with db.session() as s:
            journal.resolve(s, first, "done", "stop requested", NOW + timedelta(minutes=1))
            set_state(s, _inst("i-1"), InstanceState.STOPPED, NOW + timedelta(minutes=1))
            st = s.get(PolicyStateRow, ("p", "aws", "i-1"))
            assert st is not None
            st.state, st.since = "acted", NOW + timedelta(minutes=1)
            s.add(st)
        with db.session() as s:
            via_orm = _journal(s)
            orm_inst = s.get(InstanceRow, ("aws", "i-1"))
            orm_state = s.get(PolicyStateRow, ("p", "aws", "i-1"))
            assert orm_inst is not None and orm_state is not None
            orm_inst_values = (orm_inst.state, orm_inst.accrue_state, orm_inst.state_changed_at)
            orm_state_values = (orm_state.state, orm_state.since, orm_state.deadline)
            s.execute(ActionJournalRow.__table__.delete())  # type: ignore[attr-defined]
            s.execute(InstanceRow.__table__.delete())  # type: ignore[attr-defined]
            s.execute(PolicyStateRow.__table__.delete())  # type: ignore[attr-defined]

        rows = Rows()
        with db.session() as s:
            for iid in ("i-1", "i-2"):
                rows.record(**_entry(iid, "done"))
            rows.write(s)
            second = journal.write_intent(s, key="p|aws|i-1|stop|1", cycle_id=7, policy="p",
                                          inst=_inst("i-1"), action="stop", dry_run=False,
                                          usd_per_hour=1.0, now=NOW).id or 0
            s.add(_instance_row("i-1"))
            st = PolicyStateRow(policy="p", provider="aws", instance_id="i-1",
                                state="warned", since=NOW, deadline=NOW)
            s.add(st)
        settled = Settled()
        settled.resolve(second, "done", "stop requested", NOW + timedelta(minutes=1))
        settled.set_state(_inst("i-1"), InstanceState.STOPPED, NOW + timedelta(minutes=1))
        settled.set_state(_inst("i-gone"), InstanceState.STOPPED, NOW)  # no row: no change
        settled.state(st, state="acted", since=NOW + timedelta(minutes=1))
        with db.session() as s:
            settled.write(s)
        with db.session() as s:
            got = _journal(s)  # ids relative to the first: SQLite reuses them, PG does not
            assert ([(r[0] - got[0][0], *r[1:]) for r in got]
                    == [(r[0] - via_orm[0][0], *r[1:]) for r in via_orm])
            inst = s.get(InstanceRow, ("aws", "i-1"))
            state = s.get(PolicyStateRow, ("p", "aws", "i-1"))
            assert inst is not None and state is not None
            assert (inst.state, inst.accrue_state, inst.state_changed_at) == orm_inst_values
            assert (state.state, state.since, state.deadline) == orm_state_values
            assert s.get(InstanceRow, ("aws", "i-gone")) is None
    finally:
        db.dispose()


def test_findings_keep_their_order_and_a_vanished_intent_is_an_error(db_url: str) -> None:
    db = Database(db_url)
    try:
        rows = Rows()
        with db.session() as s:
            for iid in ("i-3", "i-1", "i-2"):
                rows.finding(cycle_id=1, policy="p", inst=_inst(iid), observed_at=NOW,
                             reason="idle", evidence="e", usd_per_hour=2.0, team=None)
            rows.write(s)
            assert rows.findings == []  # written once
            rows.write(s)
        with db.session() as s:
            got = list(s.exec(select(FindingRow).order_by(col(FindingRow.id))))
            assert [f.instance_id for f in got] == ["i-3", "i-1", "i-2"]
            assert got[0].observed_at == NOW and got[0].usd_per_hour == 2.0
        settled = Settled()
        settled.resolve(12345, "done", "x", NOW)
        if db.engine.dialect.supports_sane_multi_rowcount:
            with pytest.raises(AssertionError), db.session() as s:
                settled.write(s)
    finally:
        db.dispose()


def test_intents_get_their_ids_in_order_and_new_states_their_final_values(db_url: str) -> None:
    db = Database(db_url)
    try:
        rows = [{**journal_entry(**_entry(iid, "intent")), "result_at": None}
                for iid in ("i-9", "i-1", "i-5")]
        fresh = Rows()
        st = NewState(policy="p", provider="aws", instance_id="i-9", state="seen", since=NOW,
                      evidence="e")
        fresh.states.append(st)
        with db.session() as s:
            ids = write_intents(s, rows)
            assert write_intents(s, []) == []
            st.state, st.deadline, st.episode = "warned", NOW + timedelta(hours=1), 2
            fresh.write(s)
        with db.session() as s:
            got = {r.id: (r.instance_id, r.status, r.result_at)
                   for r in s.exec(select(ActionJournalRow))}
            assert [got[i] for i in ids] == [("i-9", "intent", None), ("i-1", "intent", None),
                                             ("i-5", "intent", None)]
            stored = s.get(PolicyStateRow, ("p", "aws", "i-9"))
            assert stored is not None
            assert (stored.state, stored.since, stored.deadline, stored.snooze_until,
                    stored.episode, stored.evidence) == (
                "warned", NOW, NOW + timedelta(hours=1), None, 2, "e")
    finally:
        db.dispose()


def test_a_spill_writes_what_is_held_in_the_blocks_transaction(
    db_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Journal entries, findings and alerts are written once `SPILL_AT` are held, inside the
    block (a crash before its end rolls them back); new states only at `write`, with the
    values the block left them in."""
    monkeypatch.setattr("costguard.actions.bulk.SPILL_AT", 3)
    db = Database(db_url)
    try:
        with pytest.raises(RuntimeError), db.session() as s:
            rows = Rows()
            rows.record(**_entry("i-1", "done"))
            rows.spill(s)
            assert _journal(s) == []  # two held: under SPILL_AT
            rows.record(**_entry("i-2", "done"))
            rows.finding(cycle_id=7, policy="p", inst=_inst("i-2"), observed_at=NOW,
                         reason="idle", evidence="e", usd_per_hour=1.0, team=None)
            rows.states.append(NewState("p", "aws", "i-2", "seen", NOW))
            rows.spill(s)
            assert [r[1] for r in _journal(s)] == ["p|aws|i-1|notify|1", "p|aws|i-2|notify|1"]
            assert len(list(s.exec(select(FindingRow)))) == 1
            assert list(s.exec(select(PolicyStateRow))) == []  # the block may still move it
            raise RuntimeError("the cycle dies before the block ends")
        with db.session() as s:  # nothing of the dead block was kept
            assert _journal(s) == [] and list(s.exec(select(FindingRow))) == []

        with db.session() as s:
            rows = Rows()
            state = NewState("p", "aws", "i-3", "seen", NOW)
            rows.states.append(state)
            for iid in ("i-3", "i-4", "i-5"):
                rows.record(**_entry(iid, "done"))
            rows.spill(s)
            state.state = "warned"  # moved after the spill
            rows.record(**_entry("i-6", "done"))
            rows.write(s)
        with db.session() as s:
            assert [r[5] for r in _journal(s)] == ["i-3", "i-4", "i-5", "i-6"]  # in order
            stored = s.get(PolicyStateRow, ("p", "aws", "i-3"))
            assert stored is not None and stored.state == "warned"
    finally:
        db.dispose()


def test_stored_states_write_back_only_the_columns_the_block_changed(db_url: str) -> None:
    """The act stage reads a policy's states as plain objects and writes back, with its
    block, what it moved in them: an unmoved state is not written, and a column another
    writer set meanwhile (`costguard snooze`) keeps that writer's value unless the block
    moved that column too. A block that dies writes nothing."""
    later, hour = NOW + timedelta(minutes=30), timedelta(hours=1)
    db = Database(db_url)
    try:
        with db.session() as s:
            for policy, iid in (("p", "i-1"), ("p", "i-2"), ("p", "i-3"), ("other", "i-1")):
                s.add(PolicyStateRow(policy=policy, provider="aws", instance_id=iid,
                                     state="warned", since=NOW, deadline=NOW + hour,
                                     episode=2, evidence="old"))

        def states() -> dict[tuple[str, str], tuple[Any, ...]]:
            with db.session() as s:
                return {(r.policy, r.instance_id): (r.state, r.since, r.deadline,
                                                    r.snooze_until, r.episode, r.evidence)
                        for r in s.exec(select(PolicyStateRow))}

        before = states()
        with pytest.raises(RuntimeError), db.session() as s:
            rows = Rows()
            rows.keep(stored_states(s, "p"))
            for st in rows.stored:
                st.evidence = "moved"
            raise RuntimeError("the cycle dies before the block ends")
        assert states() == before

        with db.session() as s:
            rows = Rows()
            stored = {st.instance_id: st for st in stored_states(s, "p")}
            assert sorted(stored) == ["i-1", "i-2", "i-3"]  # the policy's only
            assert stored["i-1"].values() == ("warned", NOW, NOW + hour, None, 2, "old")
            rows.keep(stored.values())
            stored["i-1"].evidence = "idle 58 of 60 minutes"
            moved = stored["i-2"]
            moved.state, moved.since, moved.deadline, moved.snooze_until = (
                "cleared", later, None, NOW)
            moved.evidence = "old"  # set to what it was: not a change
            with db.session() as other:  # meanwhile, a snooze of i-1, i-2 and i-3
                for iid in ("i-1", "i-2", "i-3"):
                    row = other.get(PolicyStateRow, ("p", "aws", iid))
                    assert row is not None
                    row.snooze_until = later + hour
            rows.write(s)
            assert rows.stored == []
        snoozed = later + hour
        assert states() == {
            ("p", "i-1"): ("warned", NOW, NOW + hour, snoozed, 2, "idle 58 of 60 minutes"),
            ("p", "i-2"): ("cleared", later, None, NOW, 2, "old"),  # its own snooze column
            ("p", "i-3"): ("warned", NOW, NOW + hour, snoozed, 2, "old"),
            ("other", "i-1"): ("warned", NOW, NOW + hour, None, 2, "old"),
        }
    finally:
        db.dispose()
