"""Spot: what an on-demand instance would save on spot, and the spot interruptions seen.

Interruptions are read from inventory (the provider's state reason) and journaled once each
as `interrupted` entries, so they stay queryable after the instance row changes again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session, col, select

from costguard.errors import ProviderError
from costguard.model import Instance, InstanceState, Lifecycle
from costguard.providers.base import Provider
from costguard.store.inventory import to_instance
from costguard.store.tables import ActionJournalRow, InstanceRow

# AWS state reasons for reclaimed spot capacity; GCP reports preemption as status PREEMPTED
INTERRUPTION_REASONS = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown",
                        "PREEMPTED")
INTERRUPTION_POLICY = "(spot-market)"


def spot_saving(providers: Mapping[str, Provider], inst: Instance) -> float | None:
    """USD/h saved by running `inst` as spot at current spot prices; None if unknown, and
    for an instance that is not running (it costs no compute to save on). The inventory
    reads the spot prices of the types that run (spot.py); a stopped instance's type would
    be a call of its own, made inside the act stage's transaction."""
    if inst.lifecycle is not Lifecycle.ON_DEMAND or inst.state is not InstanceState.RUNNING:
        return None
    provider = providers.get(inst.provider)
    if provider is None:
        return None
    try:
        on_demand = provider.price(inst)
        spot = provider.price(inst.model_copy(update={"lifecycle": Lifecycle.SPOT}))
    except ProviderError:
        return None
    if on_demand is None or spot is None:
        return None
    return round(max(on_demand.usd_per_hour - spot.usd_per_hour, 0.0), 4)


def is_interruption(reason: str | None) -> bool:
    return bool(reason) and any(r.lower() in (reason or "").lower() for r in INTERRUPTION_REASONS)


def record_interruptions(session: Session, now: datetime, cycle_id: int | None) -> int:
    """Journal every spot interruption inventory shows that is not journaled yet."""
    rows = session.exec(select(InstanceRow).where(col(InstanceRow.state_reason).is_not(None),
                                                  InstanceRow.lifecycle == "spot"))
    added = 0
    for row in rows:
        if not is_interruption(row.state_reason):
            continue
        key = (f"{INTERRUPTION_POLICY}|{row.provider}|{row.instance_id}|interrupted|"
               f"{row.state_changed_at.isoformat()}")
        seen = session.exec(select(ActionJournalRow.id).where(ActionJournalRow.key == key)).first()
        if seen is not None:
            continue
        inst = to_instance(row)
        session.add(ActionJournalRow(
            key=key, cycle_id=cycle_id, policy=INTERRUPTION_POLICY, provider=row.provider,
            instance_id=row.instance_id, action="interrupted", dry_run=False, status="seen",
            detail=f"{inst.instance_type} in {inst.zone or inst.region}: {row.state_reason}",
            usd_per_hour=0.0, intent_at=row.state_changed_at, result_at=now))
        added += 1
    return added


@dataclass(frozen=True)
class InterruptionCount:
    instance_type: str
    zone: str
    count: int


def interruptions(session: Session, since: datetime) -> list[InterruptionCount]:
    """Spot interruptions since `since`, per instance type and zone, most first."""
    entries = session.exec(select(ActionJournalRow.detail).where(
        ActionJournalRow.action == "interrupted", col(ActionJournalRow.intent_at) >= since))
    counts: Counter[tuple[str, str]] = Counter()
    for detail in entries:
        where, _, _ = detail.partition(":")
        itype, _, zone = where.partition(" in ")
        counts[(itype, zone)] += 1
    return [InterruptionCount(t, z, n) for (t, z), n in
            sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
