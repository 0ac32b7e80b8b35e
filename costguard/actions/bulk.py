"""Bulk writes of the act stage: one statement per table instead of one ORM object per row.

`Rows` collects what a block of the act stage appends (journal entries, findings, alerts)
while its session is open; `Rows.write` inserts them, in the order they were added, before
the session commits, so they commit or roll back with that block exactly as the ORM rows
did. `Settled` collects what resolving stops changes (journal results, policy states,
instance states, action alerts) and writes it with one executemany UPDATE per table.

Nothing in a block reads these tables back before `write`, except the outbox's dedupe check,
which remembers the keys added in its transaction (`outbox.enqueue_many`). So a block may
`spill` the journal entries, findings and alerts it holds before its end, in the same
transaction: a first cycle's notify policy at 100,000 instances held 50,000 of each (and
their 50,000-row statements) at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, TypeAlias

from sqlalchemy import Update, bindparam, insert, select, update
from sqlmodel import Session

from costguard.alerts.outbox import enqueue_many
from costguard.model import Instance, InstanceState
from costguard.store.tables import ActionJournalRow, FindingRow, InstanceRow, PolicyStateRow
from costguard.store.upsert import insert_many

_JOURNAL = ActionJournalRow.__table__  # type: ignore[attr-defined]
_FINDINGS = FindingRow.__table__  # type: ignore[attr-defined]
_STATES = PolicyStateRow.__table__  # type: ignore[attr-defined]
_INSTANCES = InstanceRow.__table__  # type: ignore[attr-defined]


@dataclass(slots=True)
class NewState:
    """A policy state the block creates: a plain object (not an ORM row) that the state
    machine moves like a stored one, inserted with its final values by `Rows.write`."""

    policy: str
    provider: str
    instance_id: str
    state: str
    since: datetime
    deadline: datetime | None = None
    snooze_until: datetime | None = None
    episode: int = 1
    evidence: str = ""

    def row(self) -> dict[str, Any]:
        return dict(zip(_KEY + _MOVED, (self.policy, self.provider, self.instance_id,
                                        *self.values()), strict=True))

    def values(self) -> tuple[Any, ...]:
        """What the state machine moves (`_MOVED`), in that order."""
        return (self.state, self.since, self.deadline, self.snooze_until, self.episode,
                self.evidence)


_KEY = ("policy", "provider", "instance_id")
_MOVED = ("state", "since", "deadline", "snooze_until", "episode", "evidence")
# `stored_states` builds a state from a row of these columns, by position
assert tuple(f.name for f in fields(NewState)) == _KEY + _MOVED


@dataclass(slots=True)
class StoredState(NewState):
    """A policy state read from the store (`stored_states`), moved as a new one is; `Rows`
    writes back at the block's end the columns the block changed (`loaded`: its values as
    read), as the ORM's flush of a changed row did: a column something else set meanwhile
    (`costguard snooze`) is not overwritten with what was read. A plain object, not an ORM
    row: a fleet's states loaded, instrumented and flushed one by one cost more than the
    rest of a steady cycle's act stage."""

    loaded: tuple[Any, ...] = ()

    def changes(self) -> dict[str, Any]:
        """The moved columns whose value differs from what was read, with the new value."""
        return {name: new for name, new, old in zip(_MOVED, self.values(), self.loaded,
                                                     strict=True) if new != old}


State: TypeAlias = NewState  # stored (a StoredState) or new


def stored_states(s: Session, policy: str) -> list[StoredState]:
    """The policy's stored states, as `StoredState`s (each kept by `Rows.keep` to be written
    back when changed)."""
    c = _STATES.c
    out: list[StoredState] = []
    for row in s.execute(select(*(c[k] for k in (*_KEY, *_MOVED))).where(c.policy == policy)):
        st = StoredState(*row)
        st.loaded = st.values()
        out.append(st)
    return out


SPILL_AT = 5_000  # journal entries, findings and alerts held before `Rows.spill` writes them


def journal_entry(*, key: str, cycle_id: int | None, policy: str, inst: Instance, action: str,
                  dry_run: bool, status: str, detail: str, usd_per_hour: float,
                  now: datetime) -> dict[str, Any]:
    """The row `journal.record` adds: intent and result at once."""
    return {"key": key, "cycle_id": cycle_id, "policy": policy, "provider": inst.provider,
            "instance_id": inst.instance_id, "action": action, "dry_run": dry_run,
            "status": status, "detail": detail, "usd_per_hour": usd_per_hour,
            "intent_at": now, "result_at": now}


class Rows:
    """Append-only rows of one session, inserted in bulk by `write` (call it inside the
    session's block, after the last row is added)."""

    def __init__(self) -> None:
        self.states: list[NewState] = []
        self.stored: list[StoredState] = []  # written back by `write` where changed
        self.journal: list[dict[str, Any]] = []
        self.findings: list[dict[str, Any]] = []
        self.alerts: list[dict[str, Any]] = []

    def record(self, **entry: Any) -> None:
        """Same arguments as `journal.record` (without the session)."""
        self.journal.append(journal_entry(**entry))

    def finding(self, *, cycle_id: int | None, policy: str, inst: Instance,
                observed_at: datetime, reason: str, evidence: str, usd_per_hour: float,
                team: str | None) -> None:
        self.findings.append({
            "cycle_id": cycle_id, "policy": policy, "provider": inst.provider,
            "instance_id": inst.instance_id, "observed_at": observed_at, "reason": reason,
            "evidence": evidence, "usd_per_hour": usd_per_hour, "team": team})

    def alert(self, **fields: Any) -> None:
        """Same arguments as `outbox.enqueue` (without the session); deduplicated at write."""
        self.alerts.append(fields)

    def spill(self, s: Session) -> None:
        """Write the journal entries, findings and alerts held, once `SPILL_AT` are, inside
        the block's session (they commit or roll back with it). New states stay held: the
        block may still move them; `write` inserts them with their final values."""
        if len(self.journal) + len(self.findings) + len(self.alerts) >= SPILL_AT:
            self._write_held(s)

    def keep(self, states: Iterable[StoredState]) -> None:
        """Stored states the block may move: `write` updates those it changed."""
        self.stored.extend(states)

    def write(self, s: Session) -> None:
        states, self.states = self.states, []
        if states:
            insert_many(s, _STATES, [st.row() for st in states])
        stored, self.stored = self.stored, []
        moved = [{"b_policy": st.policy, "b_provider": st.provider,
                  "b_instance_id": st.instance_id, **changes}
                 for st in stored if (changes := st.changes())]
        for group in _same_keys(moved):  # most often `evidence` alone
            s.execute(_update_by_key(), group)
        self._write_held(s)

    def _write_held(self, s: Session) -> None:
        journal, findings, alerts = self.journal, self.findings, self.alerts
        self.journal, self.findings, self.alerts = [], [], []
        if findings:
            insert_many(s, _FINDINGS, findings)
        if alerts:
            enqueue_many(s, alerts)
        if journal:
            insert_many(s, _JOURNAL, journal)


def write_intents(s: Session, entries: Sequence[dict[str, Any]]) -> list[int]:
    """Insert intent rows (`journal_entry` with status "intent" and no result) in one
    statement; their ids, in order (`journal.write_intent` for many)."""
    if not entries:
        return []
    stmt = insert(_JOURNAL).returning(_JOURNAL.c.id, sort_by_parameter_order=True)
    return [int(i) for i in s.execute(stmt, list(entries)).scalars()]


class Settled:
    """What resolving stops changes, written with one statement per table."""

    def __init__(self) -> None:
        self.rows = Rows()  # action alerts
        self.results: list[dict[str, Any]] = []  # journal rows resolved
        self.states: list[dict[str, Any]] = []  # policy states moved
        self.instances: list[dict[str, Any]] = []  # instance states we caused

    def resolve(self, row_id: int, status: str, detail: str, now: datetime) -> None:
        """`journal.resolve`, deferred."""
        self.results.append({"b_id": row_id, "status": status, "detail": detail,
                             "result_at": now})

    def state(self, st: State, **values: Any) -> None:
        """Set `values` (state, since, deadline) on the stored policy state of `st`."""
        self.states.append({"b_policy": st.policy, "b_provider": st.provider,
                            "b_instance_id": st.instance_id, **values})

    def set_state(self, inst: Instance, state: InstanceState, now: datetime) -> None:
        """`store.inventory.set_state`, deferred (no row, no change: as there)."""
        self.instances.append({"b_provider": inst.provider, "b_instance_id": inst.instance_id,
                               "state": str(state), "accrue_state": str(state),
                               "state_changed_at": now})

    def write(self, s: Session) -> None:
        if self.results:
            result = s.execute(update(_JOURNAL).where(
                _JOURNAL.c.id == bindparam("b_id")), self.results)
            if (s.get_bind().dialect.supports_sane_multi_rowcount
                    and result.rowcount != len(self.results)):  # type: ignore[attr-defined]
                raise AssertionError("journal rows vanished before their stop was resolved")
        for group in _same_keys(self.states):
            s.execute(_update_by_key(), group)
        if self.instances:
            s.execute(update(_INSTANCES).where(
                _INSTANCES.c.provider == bindparam("b_provider"),
                _INSTANCES.c.instance_id == bindparam("b_instance_id")), self.instances)
        self.rows.write(s)
        self.results, self.states, self.instances = [], [], []


def _update_by_key() -> Update:
    """UPDATE of one policy state, keyed by `b_policy`, `b_provider`, `b_instance_id`; the
    columns set are those the parameters name."""
    c = _STATES.c
    return update(_STATES).where(c.policy == bindparam("b_policy"),
                                 c.provider == bindparam("b_provider"),
                                 c.instance_id == bindparam("b_instance_id"))


def _same_keys(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """An executemany needs the same parameters in every row: group rows by their keys."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    return list(groups.values())
