"""The action journal: intent before the provider call, result after, append-only."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from sqlmodel import Session, col, select

from costguard.store.tables import ActionJournalRow

# what the act stage of standing resources journals (costguard/standing/act.py); the
# instances' recovery leaves these to it
STANDING_ACTIONS = ("snapshot", "delete")


class Keyed(Protocol):
    """What the journal keys an entry by: an instance, or a volume, snapshot or address."""

    @property
    def provider(self) -> str: ...
    @property
    def instance_id(self) -> str: ...


def journal_key(policy: str, inst: Keyed, action: str, episode: int) -> str:
    return f"{policy}|{inst.provider}|{inst.instance_id}|{action}|{episode}"


def write_intent(
    session: Session, *, key: str, cycle_id: int | None, policy: str, inst: Keyed,
    action: str, dry_run: bool, usd_per_hour: float, now: datetime, detail: str = "",
    flush: bool = True,
) -> ActionJournalRow:
    """The intent row, flushed so it has its id (`flush=False`: the caller flushes a batch of
    intents at once, and must before reading their ids)."""
    row = ActionJournalRow(
        key=key, cycle_id=cycle_id, policy=policy, provider=inst.provider,
        instance_id=inst.instance_id, action=action, dry_run=dry_run, status="intent",
        detail=detail, usd_per_hour=usd_per_hour, intent_at=now,
    )
    session.add(row)
    if flush:
        session.flush()
    return row


def record(
    session: Session, *, key: str, cycle_id: int | None, policy: str, inst: Keyed,
    action: str, dry_run: bool, status: str, detail: str, usd_per_hour: float, now: datetime,
) -> None:
    """An entry decided without a provider call (notify, skip): intent and result at once."""
    session.add(ActionJournalRow(
        key=key, cycle_id=cycle_id, policy=policy, provider=inst.provider,
        instance_id=inst.instance_id, action=action, dry_run=dry_run, status=status,
        detail=detail, usd_per_hour=usd_per_hour, intent_at=now, result_at=now,
    ))


def resolve(session: Session, row_id: int, status: str, detail: str, now: datetime) -> None:
    row = session.get(ActionJournalRow, row_id)
    assert row is not None, f"journal row {row_id} vanished"
    row.status, row.detail, row.result_at = status, detail, now
    session.add(row)


def unresolved(session: Session, *, standing: bool = False) -> list[ActionJournalRow]:
    """Intents with no result: the process died between writing them and finishing.
    `standing`: those of volumes, snapshots and addresses (STANDING_ACTIONS), else the
    instances'."""
    kinds = col(ActionJournalRow.action).in_(STANDING_ACTIONS)
    return list(session.exec(select(ActionJournalRow).where(
        ActionJournalRow.status == "intent", kinds if standing else ~kinds,
    ).order_by(col(ActionJournalRow.id))))


def completed(session: Session, key: str) -> bool:
    stmt = select(ActionJournalRow.id).where(
        ActionJournalRow.key == key, col(ActionJournalRow.status).in_(["done", "dry-run"]))
    return session.exec(stmt).first() is not None


def failed(session: Session, action: str, *, since: datetime) -> list[ActionJournalRow]:
    """Calls that reported failure; one may still have taken effect (a timeout after EC2
    accepted the stop), which only the next inventory can tell."""
    return list(session.exec(select(ActionJournalRow).where(
        ActionJournalRow.status == "failed", ActionJournalRow.action == action,
        col(ActionJournalRow.dry_run).is_(False), col(ActionJournalRow.intent_at) >= since,
    ).order_by(col(ActionJournalRow.id))))


def episode_of(key: str) -> int:
    """The episode a journal key belongs to (its last field)."""
    tail = key.rsplit("|", 1)[-1]
    return int(tail) if tail.isdigit() else -1
