"""The store's hourly upkeep, the daemon's `prune` job (and the demo's, hour by hour):
finished days of cost rolled up and raw cost rows past retention dropped; the readings'
settled hours folded into blocks and hourly history (`costguard.store.compact`) and those
past their retention dropped; reservations' use samples past theirs."""

from __future__ import annotations

import logging
from datetime import datetime

from costguard.config import Settings
from costguard.engine.cycle import Engine
from costguard.store.compact import Progress
from costguard.store.db import Database

log = logging.getLogger("costguard.daemon")


def prune_store(engine: Engine, settings: Settings, now: datetime) -> dict[str, int]:
    """Roll finished days up, then delete raw cost intervals past retention; settle the
    readings' finished hours into blocks and history, then prune those past theirs; and
    reservations' use samples past their retention."""
    from costguard.costs import rollup
    from costguard.standing import reservations
    from costguard.store.readings import prune_minutes

    keep = settings.accounting.raw_retention
    out: dict[str, int] = {}
    with engine.db.session() as s:
        out["rolled_up_days"] = rollup.rollup(s, now)
        out["pruned_intervals"] = rollup.prune(s, now - keep)
        out["pruned_reservation_use"] = reservations.prune_use(s, now - reservations.KEPT)
    out.update(settle_readings(engine.db, settings, now))
    with engine.db.session() as s:
        out["pruned_readings"] = prune_minutes(s, now - settings.accounting.readings_raw)
    log.info("prune done", extra=out)
    return out


def settle_readings(db: Database, settings: Settings, now: datetime,
                    progress: Progress | None = None) -> dict[str, int]:
    """Fold the readings' settled hours into blocks and hourly history (a transaction per
    batch of instances), then drop blocks and history past `accounting`'s retention."""
    from costguard.store import compact

    acc = settings.accounting
    done = compact.compact(db.session, now, raw_since=now - acc.readings_raw,
                           progress=progress)
    with db.session() as s:
        pruned = compact.prune(s, raw_since=now - acc.readings_raw,
                               history_since=now - acc.readings_history)
    return {"settled_readings": done.readings, "settled_blocks": done.blocks,
            "late_readings_dropped": done.late_dropped, **pruned}
