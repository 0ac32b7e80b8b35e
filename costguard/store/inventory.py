"""Instances in the store: conversion to and from the domain model, upsert per poll."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlmodel import Session, col, select

from costguard.model import Instance, InstanceState, Lifecycle
from costguard.store.tables import AccountRow, InstanceRow


def to_instance(row: InstanceRow) -> Instance:
    return Instance(
        provider=row.provider,
        account=row.account, region=row.region, zone=row.zone,
        instance_id=row.instance_id, name=row.name, instance_type=row.instance_type,
        state=InstanceState(row.state), state_reason=row.state_reason,
        lifecycle=Lifecycle(row.lifecycle), gpu_count=row.gpu_count,
        gpu_model=row.gpu_model, gpu_memory_mib=row.gpu_memory_mib,
        launch_time=row.launch_time, tags=dict(row.tags), observed_at=row.last_seen,
        launched_by=row.launched_by,
    )


def record_inventory(
    session: Session, provider: str, seen: Sequence[Instance], now: datetime, *,
    complete: bool,
) -> list[tuple[Instance, str]]:
    """Upsert what a provider listed; returns (instance, previous state) for state changes.

    `complete` is False when some scope of this provider could not be read: then instances
    that were not listed are not marked gone (they may live in the unread scope).
    """
    existing = {
        r.instance_id: r
        for r in session.exec(select(InstanceRow).where(InstanceRow.provider == provider))
    }
    changes: list[tuple[Instance, str]] = []
    accounts: set[str] = set()
    for inst in seen:
        accounts.add(inst.account)
        row = existing.pop(inst.instance_id, None)
        if row is None:
            row = InstanceRow(
                provider=provider, instance_id=inst.instance_id, account=inst.account,
                region=inst.region, instance_type=inst.instance_type, state=str(inst.state),
                lifecycle=str(inst.lifecycle), launch_time=inst.launch_time,
                first_seen=now, last_seen=now, state_changed_at=now,
                accrued_until=now, accrue_state=str(inst.state),
            )
        elif row.state != str(inst.state) or row.gone:
            changes.append((inst, row.state))
            row.state_changed_at = now
        row.account, row.region, row.zone, row.name = (
            inst.account, inst.region, inst.zone, inst.name)
        row.instance_type, row.state, row.state_reason = (
            inst.instance_type, str(inst.state), inst.state_reason)
        row.lifecycle, row.gpu_count, row.gpu_model = (
            str(inst.lifecycle), inst.gpu_count, inst.gpu_model)
        row.gpu_memory_mib, row.launch_time, row.tags = (
            inst.gpu_memory_mib, inst.launch_time, dict(inst.tags))
        row.last_seen, row.gone = now, False
        row.launched_by = inst.launched_by
        session.add(row)
    if complete:
        for row in existing.values():
            if not row.gone:
                row.gone = True
                row.state_changed_at = now
                session.add(row)
    for account in accounts:
        acc = session.get(AccountRow, (provider, account))
        if acc is None:
            session.add(AccountRow(provider=provider, account_id=account,
                                   first_seen=now, last_seen=now))
        else:
            acc.last_seen = now
            session.add(acc)
    return changes


def current_instances(session: Session, *, include_gone: bool = False) -> list[Instance]:
    stmt = select(InstanceRow)
    if not include_gone:
        stmt = stmt.where(col(InstanceRow.gone).is_(False))
    return [to_instance(r) for r in session.exec(stmt)]


def set_state(session: Session, inst: Instance, state: InstanceState, now: datetime) -> None:
    """Record a state we caused (a stop): costs stop accruing from here."""
    row = session.get(InstanceRow, (inst.provider, inst.instance_id))
    if row is not None:
        row.state = row.accrue_state = str(state)
        row.state_changed_at = now
        session.add(row)
