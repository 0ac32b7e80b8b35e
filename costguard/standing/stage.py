"""The standing stage of a cycle: list the volumes, snapshots, addresses and capacity
reservations the policies govern, keep them in the store with since when each has been
unused, judge them and act.

Listing runs at most once per `LIST_EVERY` (these resources change by the day, and a listing
costs a handful of calls per scope); judging and acting run every cycle from the stored rows,
so a grace period ends on time. A volume or address whose every holder is an instance the
inventory shows stopped is unused since the latest of those stops. Rows a provider no longer
lists are marked gone, unless that provider's listing had gaps (then nothing is concluded).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session, col, select

from costguard.actions.safety import Budget
from costguard.alerts.gaps import STORAGE_SCOPE, record_gaps
from costguard.costs.attribution import Attributor
from costguard.policy.kinds import KINDS
from costguard.policy.schema import Policy
from costguard.standing.act import StandingRunner
from costguard.standing.billed import billed_monthly
from costguard.standing.evaluate import evaluate
from costguard.standing.model import (
    HoldsStanding,
    Standing,
    StandingKind,
    from_row,
)
from costguard.standing.reservations import record_use
from costguard.store import control
from costguard.store.db import Database
from costguard.store.tables import InstanceRow, StandingRow

log = logging.getLogger("costguard.standing")

LIST_EVERY = timedelta(hours=1)
LISTED_AT = "standing:listed-at"  # control key: when the last listing ran


def governed(policies: Iterable[Policy], providers: Mapping[str, object]
             ) -> dict[str, frozenset[StandingKind]]:
    """Provider -> the standing kinds its policies govern (and it can list)."""
    out: dict[str, set[StandingKind]] = {}
    for policy in policies:
        if not KINDS[policy.resource].standing:
            continue
        kind = StandingKind(policy.resource)
        for name in policy.providers:
            provider = providers.get(name)
            if isinstance(provider, HoldsStanding) and kind in provider.standing_kinds():
                out.setdefault(name, set()).add(kind)
    return {name: frozenset(k) for name, k in out.items() if k}


def current(s: Session, kinds: Iterable[str] | None = None) -> list[Standing]:
    """Every resource not gone, as stored (`unused_since`: since when costguard knows it
    has been unused)."""
    stmt = select(StandingRow).where(col(StandingRow.gone).is_(False))
    if kinds is not None:
        stmt = stmt.where(col(StandingRow.kind).in_(list(kinds)))
    rows = s.exec(stmt.order_by(col(StandingRow.provider), col(StandingRow.resource_id)))
    return [from_row(r) for r in rows]


def holder(s: Session, item: Standing, ref: str) -> InstanceRow | None:
    """The stored instance `ref` names: by id (EC2), else by name in the item's zone (a
    persistent disk's `users` name their VMs) or in the zone `ref` gives (`ZONE/NAME`: a
    GCP address's VM)."""
    row = s.get(InstanceRow, (item.provider, ref))
    zone, _, name = ref.rpartition("/") if "/" in ref else (item.zone, "", ref)
    if row is None and zone:
        row = s.exec(select(InstanceRow).where(
            InstanceRow.provider == item.provider, InstanceRow.account == item.account,
            InstanceRow.zone == zone, InstanceRow.name == name,
            col(InstanceRow.gone).is_(False))).first()
    return row


def held_by_stopped(s: Session, item: Standing) -> Standing:
    """`item`, not in use when every instance holding it is stopped (since the latest stop)."""
    if not item.used_by or item.kind is StandingKind.SNAPSHOT:
        return item
    rows = [holder(s, item, ref) for ref in item.used_by]
    if any(r is None or r.gone or r.state != "stopped" for r in rows):
        return item
    stopped = max(r.state_changed_at for r in rows if r is not None)
    return item.model_copy(update={"in_use": False, "unused_since": stopped})


def with_billed(item: Standing, billed: Mapping[str, tuple[float, float]]) -> Standing:
    """`item` priced at its billed rate (standing/billed.py) where the bill names it. Not a
    reservation: its price is of its unused part now, which a month's bill does not give."""
    found = None if item.reservation is not None else billed.get(item.resource_id)
    if found is None:
        return item
    usd, hours = found
    listed = (f"; list ${item.usd_per_month:,.2f}" if item.usd_per_month is not None else "")
    return item.model_copy(update={
        "usd_per_month": usd,
        "price_source": f"billed: EffectiveCost of {hours / 24:.0f} days{listed}"})


def store(db: Database, provider: str, kinds: frozenset[StandingKind], items: list[Standing],
          complete: bool, now: datetime, attributor: Attributor) -> Counter[str]:
    """Upsert what `provider` listed, with its team; with `complete` (no gaps), rows of
    `kinds` it did not list are gone. Returns counts by kind."""
    counts: Counter[str] = Counter()
    with db.session() as s:
        seen: set[str] = set()
        billed = billed_monthly(s, provider, now)  # imported bills, where they name them
        for raw in items:
            item = with_billed(held_by_stopped(s, raw), billed)
            seen.add(item.resource_id)
            counts[item.kind] += 1
            row = s.get(StandingRow, (provider, item.resource_id))
            if row is None:
                row = StandingRow(provider=provider, resource_id=item.resource_id,
                                  kind=item.kind, account=item.account, region=item.region,
                                  state=item.state, first_seen=now, last_seen=now)
            # another resource under the same id (deleted and made again): its own clock
            recreated = (row.created_at is not None and item.created_at is not None
                         and row.created_at != item.created_at)
            was_unused = (row.unused_since if not row.in_use and not row.gone and not recreated
                          else None)
            since = None if item.in_use else (item.unused_since or was_unused or now)
            row.kind, row.account, row.region, row.zone = (item.kind, item.account,
                                                           item.region, item.zone)
            row.name, row.state, row.in_use = item.name, item.state, item.in_use
            row.used_by, row.size_gb, row.detail = list(item.used_by), item.size_gb, item.detail
            # an address's allocation time is unknown: first seen stands for it
            row.created_at = item.created_at or row.created_at or now
            row.unused_since = since
            row.usd_per_month, row.price_source = item.usd_per_month, item.price_source
            row.tags, row.last_seen, row.gone = dict(item.tags), now, False
            row.team = attributor.dimensions(item).get("team")
            row.reservation = (item.reservation.model_dump(mode="json")
                               if item.reservation is not None else None)
            s.add(row)
            if item.reservation is not None:
                record_use(s, item, row.team, now)
        if complete:
            stale = s.exec(select(StandingRow).where(
                StandingRow.provider == provider, col(StandingRow.gone).is_(False),
                col(StandingRow.kind).in_([str(k) for k in kinds])))
            for row in stale:
                if row.resource_id not in seen:
                    row.gone, row.last_seen = True, now
                    s.add(row)
    return counts


def list_all(db: Database, providers: Mapping[str, object],
             kinds: Mapping[str, frozenset[StandingKind]], now: datetime,
             attributor: Attributor) -> dict[str, int]:
    """List and store every governed kind of every provider; gaps are recorded as the
    inventory's are."""
    counts: Counter[str] = Counter()
    for name, wanted in kinds.items():
        provider = providers[name]
        assert isinstance(provider, HoldsStanding)
        listed = provider.list_standing(wanted)
        counts += store(db, name, wanted, listed.items, not listed.gaps, now, attributor)
        gaps = [g.model_copy(update={"scope": g.scope + STORAGE_SCOPE}) for g in listed.gaps]
        with db.session() as s:
            record_gaps(s, name, gaps, now, storage=True)
    return dict(counts)


def govern(db: Database, providers: Mapping[str, object], policies: Sequence[Policy],
           runner: StandingRunner, attributor: Attributor, now: datetime,
           cycle_id: int | None, *, paused: bool = False, budget: Budget | None = None
           ) -> dict[str, Any]:
    """The whole stage: list (when due), judge every governed resource, act (unless
    paused) within what `budget` leaves of the fleet-wide per-cycle caps. Returns what the
    cycle's summary says of it (empty: nothing governed)."""
    kinds = governed(policies, providers)
    if not kinds:
        return {}
    out: dict[str, Any] = {}
    with db.session() as s:
        listed_at = control.get_time(s, LISTED_AT)
    if listed_at is None or now - listed_at >= LIST_EVERY or now < listed_at:
        out["listed"] = list_all(db, providers, kinds, now, attributor)
        with db.session() as s:
            control.put(s, LISTED_AT, now.isoformat(), now)
    mine = [p for p in policies if KINDS[p.resource].standing]
    with db.session() as s:
        held = current(s, {p.resource for p in mine})
    findings = [f for p in mine for item in held if (f := evaluate(p, item, now)) is not None]
    out["findings"] = dict(Counter(f.policy.name for f in findings if f.holds))
    if not paused:
        out["actions"] = runner.run(mine, findings, now, cycle_id, budget).as_dict()
    return out
