"""Daily digests: deliveries `held` by a `digest: true` route become one message per
recipient at `digest.hour_utc`, holding everything routed before that hour."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import col, select

from costguard.alerts.queue import DispatchStats
from costguard.alerts.settings import DigestSettings
from costguard.alerts.tables import AlertDeliveryRow
from costguard.store.db import Database


def build_digests(db: Database, settings: DigestSettings, now: datetime,
                  stats: DispatchStats) -> None:
    cut = now.replace(hour=settings.hour_utc, minute=0, second=0, microsecond=0)
    if now < cut:
        return
    with db.session() as s:
        held = list(s.exec(select(AlertDeliveryRow).where(
            AlertDeliveryRow.status == "held", col(AlertDeliveryRow.digest_id).is_(None),
            col(AlertDeliveryRow.created_at) < cut).order_by(col(AlertDeliveryRow.id))))
        groups: dict[tuple[str, str], list[AlertDeliveryRow]] = {}
        for row in held:
            groups.setdefault((row.channel, row.target), []).append(row)
        for (channel, target), rows in groups.items():
            key = f"digest|{channel}:{target}|{cut:%Y-%m-%d}"
            if s.exec(select(AlertDeliveryRow.id).where(
                    AlertDeliveryRow.dedupe_key == key)).first() is not None:
                continue  # today's digest is out; these wait for tomorrow's
            digest = AlertDeliveryRow(dedupe_key=key, alert_id=None, channel=channel,
                                      target=target, kind="digest", status="pending",
                                      created_at=now, next_attempt_at=now)
            s.add(digest)
            s.flush()
            for row in rows:
                row.digest_id = digest.id
                s.add(row)
            stats.digests += 1
