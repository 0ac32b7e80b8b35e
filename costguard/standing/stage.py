"""The standing stage of a cycle: list the volumes, snapshots and addresses the policies
govern, keep them in the store with since when each has been unused, judge them and act.

Listing runs at most once per `LIST_EVERY` (these resources change by the day, and a listing
costs a handful of calls per scope); judging and acting run every cycle from the stored rows,
so a grace period ends on time. A volume or address whose every holder is an instance the
inventory shows stopped is unused since the latest of those stops. Rows a provider no longer
lists are marked gone, unless that provider's listing had gaps (then nothing is concluded).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from costguard.costs.attribution import Attributor
from costguard.engine.collect import STORAGE_SCOPE, record_gaps
from costguard.policy.schema import Policy
from costguard.standing.model import HoldsStanding, Standing, StandingKind, kinds_of
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
        kinds = kinds_of([policy.resource])
        for name in policy.providers:
            provider = providers.get(name)
            if kinds and isinstance(provider, HoldsStanding):
                out.setdefault(name, set()).update(kinds & provider.standing_kinds())
    return {name: frozenset(k) for name, k in out.items() if k}


def to_standing(row: StandingRow) -> Standing:
    return Standing(
        kind=StandingKind(row.kind), provider=row.provider,
        account=row.account, region=row.region, zone=row.zone, resource_id=row.resource_id,
        name=row.name, state=row.state, in_use=row.in_use, used_by=tuple(row.used_by),
        size_gb=row.size_gb, detail=row.detail, created_at=row.created_at,
        unused_since=row.unused_since, usd_per_month=row.usd_per_month,
        price_source=row.price_source, tags=dict(row.tags), observed_at=row.last_seen)


def current(s: Session, kinds: Iterable[str] | None = None
            ) -> list[tuple[Standing, datetime | None]]:
    """Every resource not gone, with since when it has been unused (None: in use)."""
    stmt = select(StandingRow).where(col(StandingRow.gone).is_(False))
    if kinds is not None:
        stmt = stmt.where(col(StandingRow.kind).in_(list(kinds)))
    rows = s.exec(stmt.order_by(col(StandingRow.provider), col(StandingRow.resource_id)))
    return [(to_standing(r), r.unused_since) for r in rows]


def held_by_stopped(s: Session, item: Standing) -> Standing:
    """`item`, not in use when every instance holding it is stopped (since the latest stop)."""
    if not item.used_by or item.kind is StandingKind.SNAPSHOT:
        return item
    rows = [s.get(InstanceRow, (item.provider, ref)) for ref in item.used_by]
    if any(r is None or r.gone or r.state != "stopped" for r in rows):
        return item
    stopped = max(r.state_changed_at for r in rows if r is not None)
    return item.model_copy(update={"in_use": False, "unused_since": stopped})


def store(db: Database, provider: str, kinds: frozenset[StandingKind], items: list[Standing],
          complete: bool, now: datetime, attributor: Attributor) -> Counter[str]:
    """Upsert what `provider` listed, with its team; with `complete` (no gaps), rows of
    `kinds` it did not list are gone. Returns counts by kind."""
    counts: Counter[str] = Counter()
    with db.session() as s:
        seen: set[str] = set()
        for raw in items:
            item = held_by_stopped(s, raw)
            seen.add(item.resource_id)
            counts[item.kind] += 1
            row = s.get(StandingRow, (provider, item.resource_id))
            if row is None:
                row = StandingRow(provider=provider, resource_id=item.resource_id,
                                  kind=item.kind, account=item.account, region=item.region,
                                  state=item.state, first_seen=now, last_seen=now)
            was_unused = row.unused_since if not row.in_use and not row.gone else None
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
            s.add(row)
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
