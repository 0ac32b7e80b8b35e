"""Instances in the store: conversion to and from the domain model, upsert per poll."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from functools import lru_cache
from operator import itemgetter
from typing import Any

from sqlalchemy import Select, Table, and_, bindparam, insert, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Dialect
from sqlmodel import Session, select

from costguard.kept_text import cut
from costguard.model import Instance, InstanceKind, InstanceState, Lifecycle, Owner
from costguard.store.tables import AccountRow, InstanceRow
from costguard.store.upsert import BindProcessors, driver_sql

_TABLE: Table = InstanceRow.__table__  # type: ignore[attr-defined]


def _chars(column: str) -> int:
    """The characters `instances.COLUMN` holds (its VARCHAR's length)."""
    return int(getattr(_TABLE.c[column].type, "length"))  # noqa: B009 (TypeEngine has none)


_NAME_CHARS, _REASON_CHARS, _LAUNCHER_CHARS = map(_chars, ("name", "state_reason",
                                                           "launched_by"))


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
        owner=Owner.model_validate(row.owner) if row.owner else None,
        kind=InstanceKind(row.kind),
    )


# what a listing says about an instance, in this order: an existing row is written only when
# one of these (or `gone`) differs from the instance's; every listed row gets `last_seen`
_LISTED = ("account", "region", "zone", "name", "instance_type", "state", "state_reason",
           "lifecycle", "gpu_count", "gpu_model", "gpu_memory_mib", "launch_time", "tags",
           "launched_by", "owner", "kind")
_CHUNK = 500  # ids per IN (...) list: well inside SQLite's and PostgreSQL's parameter limits


def _listed(inst: Instance) -> tuple[Any, ...]:
    # free text is kept to its column (kept_text): a Kubernetes workload's name,
    # namespace/kind/name, reaches 330 characters, and PostgreSQL refused the row past its
    # column, and with it the whole inventory's write, every cycle
    return (inst.account, inst.region, inst.zone, cut(inst.name, _NAME_CHARS),
            inst.instance_type, str(inst.state), cut(inst.state_reason, _REASON_CHARS),
            str(inst.lifecycle), inst.gpu_count, inst.gpu_model, inst.gpu_memory_mib,
            inst.launch_time, inst.tags, cut(inst.launched_by, _LAUNCHER_CHARS),
            owner_json(inst.owner), str(inst.kind))


def owner_json(owner: Owner | None) -> dict[str, Any] | None:
    """How `instances.owner` keeps an owner: its fields, unset ones left out."""
    return owner.model_dump(mode="json", exclude_defaults=True) if owner else None


def record_inventory(
    session: Session, provider: str, seen: Sequence[Instance], now: datetime, *,
    complete: bool,
) -> list[tuple[Instance, str]]:
    """Upsert what a provider listed; returns (instance, previous state) for state changes.

    `complete` is False when some scope of this provider could not be read: then instances
    that were not listed are not marked gone (they may live in the unread scope).

    Core statements, not ORM objects: a row whose listed columns are unchanged gets only
    `last_seen` (one UPDATE per chunk of ids), changed rows are rewritten, new rows inserted,
    each as one executemany. ORM instances of these rows already in `session` are expired.
    """
    if session.autoflush:
        session.flush()  # what an ORM query here would have flushed first
    t = _TABLE
    c = t.c
    existing: dict[str, tuple[Any, ...]] = {}
    cols = [c.instance_id, *(c[k] for k in _LISTED), c.gone]
    for row in session.execute(select(*cols).where(c.provider == provider)):
        existing[row[0]] = tuple(row[1:])
    changes: list[tuple[Instance, str]] = []
    accounts: set[str] = set()
    inserts: list[tuple[str, tuple[Any, ...]]] = []  # (instance id, listed)
    moved: list[dict[str, Any]] = []  # changed, state changed or back from gone
    edited: list[dict[str, Any]] = []  # changed, same state
    touched: list[str] = []  # unchanged: last_seen only
    for inst in seen:
        accounts.add(inst.account)
        listed = _listed(inst)
        old = existing.pop(inst.instance_id, None)
        if old is None:
            inserts.append((inst.instance_id, listed))
            continue
        gone = old[-1]
        if not gone and old[:-1] == listed:
            touched.append(inst.instance_id)
            continue
        values = {"_id": inst.instance_id, **dict(zip(_LISTED, listed, strict=True)),
                  "last_seen": now, "gone": False}
        if old[_STATE_AT] != listed[_STATE_AT] or gone:
            changes.append((inst, old[_STATE_AT]))
            values["state_changed_at"] = now
            moved.append(values)
        else:
            edited.append(values)
    _insert(session, provider, inserts, now)
    by_id = and_(c.provider == provider, c.instance_id == bindparam("_id"))
    for rows in (moved, edited):
        if rows:
            session.execute(update(t).where(by_id), rows)
    _update_ids(session, provider, touched, {"last_seen": now})
    if complete:
        went = [iid for iid, old in existing.items() if not old[-1]]
        _update_ids(session, provider, went, {"gone": True, "state_changed_at": now})
    _expire_loaded(session, provider)
    for account in accounts:
        acc = session.get(AccountRow, (provider, account))
        if acc is None:
            session.add(AccountRow(provider=provider, account_id=account,
                                   first_seen=now, last_seen=now))
        else:
            acc.last_seen = now
            session.add(acc)
    return changes


def _insert(session: Session, provider: str, rows: list[tuple[str, tuple[Any, ...]]],
            now: datetime) -> None:
    """New rows, as the driver's own executemany: a first cycle inserts the whole fleet, and
    SQLAlchemy's per-row parameter processing cost more than the insert. The SQL is still
    SQLAlchemy's, and each value goes through its column type's bind processor (the ones
    every new row shares, once)."""
    if not rows:
        return
    conn = session.connection()
    sql, positional, procs = _insert_sql(conn.dialect)

    def bind(name: str, value: Any) -> Any:
        process = procs.get(name)
        return value if process is None else process(value)

    shared = {k: bind(k, v) for k, v in (
        ("provider", provider), ("first_seen", now), ("last_seen", now),
        ("state_changed_at", now), ("accrued_until", now), ("gone", False))}
    processed = [(i, procs[k]) for i, k in enumerate(_LISTED) if k in procs]
    id_proc = procs.get("instance_id")
    state_proc = procs.get("accrue_state")
    params: list[Any] = []
    for instance_id, listed in rows:
        values = list(listed)
        for i, process in processed:
            values[i] = process(values[i])
        row = dict(zip(_LISTED, values, strict=True))
        row.update(shared)
        row["instance_id"] = instance_id if id_proc is None else id_proc(instance_id)
        state = listed[_STATE_AT]
        row["accrue_state"] = state if state_proc is None else state_proc(state)
        params.append(_INSERT_ORDER(row) if positional else row)
    conn.exec_driver_sql(sql, params)


_INSERT_COLS = [c.name for c in _TABLE.columns]
_INSERT_ORDER = itemgetter(*_INSERT_COLS)
_STATE_AT = _LISTED.index("state")


@lru_cache(maxsize=4)
def _insert_sql(dialect: Dialect) -> tuple[str, bool, BindProcessors]:
    """The INSERT as driver SQL, whether it takes positional parameters (in `_INSERT_COLS`
    order), and the bind processor of each column that has one on `dialect`."""
    return driver_sql(insert(_TABLE), _TABLE, _INSERT_COLS, dialect)


def _update_ids(session: Session, provider: str, ids: list[str], values: dict[str, Any]
                ) -> None:
    """The same `values` on every row of `provider` in `ids`."""
    c = _TABLE.c
    stmt = update(_TABLE).where(
        c.provider == provider, c.instance_id.in_(bindparam("ids", expanding=True))
    ).values(values)
    for start in range(0, len(ids), _CHUNK):
        session.execute(stmt, {"ids": ids[start:start + _CHUNK]})


def _expire_loaded(session: Session, provider: str) -> None:
    """ORM copies of rows written above by Core statements reload on their next use."""
    for state in session.identity_map.all_states():
        obj = state.obj()
        if isinstance(obj, InstanceRow) and state.key is not None and state.key[1][0] == provider:
            session.expire(obj)


_READ = ("provider", "account", "region", "zone", "instance_id", "name", "instance_type",
         "state", "state_reason", "lifecycle", "gpu_count", "gpu_model", "gpu_memory_mib",
         "launch_time", "tags", "last_seen", "launched_by", "owner", "kind")


def current_instances(session: Session, *, include_gone: bool = False,
                      instance_ids: Collection[str] | None = None) -> list[Instance]:
    """The stored inventory (only `instance_ids`, when given, read 500 ids at a time), in
    the order the store returns it.

    Read as plain rows of the columns an Instance needs, not as ORM objects: loading and
    instrumenting an InstanceRow per instance cost more than building the Instance."""
    if session.autoflush:
        session.flush()  # what an ORM query here would have flushed first
    c = _TABLE.c
    stmt = sa_select(*(c[k] for k in _READ))
    if not include_gone:
        stmt = stmt.where(c.gone.is_(False))
    if instance_ids is None:
        return _instances(session, stmt)
    ids = sorted(set(instance_ids))
    return [inst for start in range(0, len(ids), _CHUNK)
            for inst in _instances(session, stmt.where(
                c.instance_id.in_(ids[start:start + _CHUNK])))]


def _instances(session: Session, stmt: Select[Any]) -> list[Instance]:
    """Instances from `stmt`'s rows. Equal values the rows share (accounts, regions, types,
    tag keys and values, the poll's time) are one object in every instance: the inventory
    lives through the cycle, and each row's own copies were a third of its size."""
    validate = Instance.model_validate
    seen: dict[Any, Any] = {}
    one = seen.setdefault
    return [
        validate({
            "provider": one(provider, provider), "account": one(account, account),
            "region": one(region, region), "zone": one(zone, zone),
            "instance_id": instance_id, "name": name,
            "instance_type": one(instance_type, instance_type),
            "state": InstanceState(state), "state_reason": state_reason,
            "lifecycle": Lifecycle(lifecycle), "gpu_count": gpu_count,
            "gpu_model": one(gpu_model, gpu_model), "gpu_memory_mib": gpu_memory_mib,
            "launch_time": one(launch_time, launch_time),
            "tags": {one(k, k): one(v, v) for k, v in tags.items()},
            "observed_at": one(last_seen, last_seen),
            "launched_by": one(launched_by, launched_by), "owner": owner,
            "kind": InstanceKind(kind),
        })
        for (provider, account, region, zone, instance_id, name, instance_type, state,
             state_reason, lifecycle, gpu_count, gpu_model, gpu_memory_mib, launch_time, tags,
             last_seen, launched_by, owner, kind) in session.execute(stmt)
    ]


def set_state(session: Session, inst: Instance, state: InstanceState, now: datetime) -> None:
    """Record a state we caused (a stop): costs stop accruing from here."""
    row = session.get(InstanceRow, (inst.provider, inst.instance_id))
    if row is not None:
        row.state = row.accrue_state = str(state)
        row.state_changed_at = now
        session.add(row)
