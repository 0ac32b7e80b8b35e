"""Scenarios over the real Engine and the scripted cloud: the idle-stop policy they share, the
engine, a clock stepped cycle by cycle, and what the engine wrote (journal, states, alerts)."""

from __future__ import annotations

from datetime import timedelta

from sqlmodel import select

from costguard.clock import Clock, ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow, PolicyStateRow
from tests.fakes.cloud import ScriptedCloud

_IDLE_STOP = """\
policies:
  - name: {name}
    mode: enforce
    filters: {{gpu: true, state: running}}
    condition:
      idle: {{below: 5, for: 45m}}
    actions:
      - notify: {notify}
      - stop: {{grace: {grace}}}
"""


def idle_stop_policy(*, name: str = "idle", grace: str = "15m", max_snooze: str | None = None,
                     message: str | None = None, then: str | None = None) -> str:
    """An enforced policy: a GPU instance idle (< 5 %) for 45 minutes is warned (its owner
    notified, with `message` if given) and stopped `grace` later, unless snoozed (for at
    most `max_snooze`). `then` is one more action after the stop, e.g. a terminate."""
    notify = "{to: owner}" if message is None else f'{{to: owner, message: "{message}"}}'
    text = _IDLE_STOP.format(name=name, notify=notify, grace=grace)
    if then is not None:
        text += f"      - {then}\n"
    if max_snooze is not None:
        text += f"    limits: {{max_snooze: {max_snooze}}}\n"
    return text


def make_engine(db_url: str, policy_text: str, cloud: ScriptedCloud) -> Engine:
    policies = parse_policy_text(policy_text)
    return Engine(Settings(), Database(db_url), {"sim": cloud}, policies, cloud.clock,
                  alert_printer=lambda kind, subject, body: None)


def run_for(engine: Engine, clock: Clock, duration: timedelta,
            step: timedelta = timedelta(minutes=5)) -> None:
    """One engine cycle every `step` for `duration` (the clock must be a ManualClock)."""
    assert isinstance(clock, ManualClock)
    end = clock.now() + duration
    while clock.now() < end:
        engine.run_cycle()
        clock.advance(step)


def journal(db: Database, iid: str | None = None) -> list[ActionJournalRow]:
    with db.session() as s:
        stmt = select(ActionJournalRow).order_by(ActionJournalRow.id)  # type: ignore[arg-type]
        rows = list(s.exec(stmt))
    return [r for r in rows if iid is None or r.instance_id == iid]


def state_of(db: Database, policy: str, iid: str) -> PolicyStateRow | None:
    with db.session() as s:
        return s.get(PolicyStateRow, (policy, "sim", iid))


def alerts(db: Database, kind: str | None = None) -> list[AlertRow]:
    with db.session() as s:
        rows = list(s.exec(select(AlertRow)))
    return [a for a in rows if kind is None or a.kind == kind]
