"""/metrics gauges read from the store: alerts and their deliveries by status."""

from __future__ import annotations

from datetime import timedelta

from costguard.alerts.outbox import enqueue
from costguard.alerts.tables import AlertDeliveryRow
from costguard.daemon.metrics import DELIVERY_STATUSES, DaemonMetrics
from costguard.engine.summary import CycleSummary
from costguard.store.db import Database
from tests.daemon.daemon_helpers import START


def _gauge(metrics: DaemonMetrics, name: str) -> dict[str, float]:
    (family,) = [m for m in metrics.registry.collect() if m.name == name]
    return {s.labels["status"]: s.value for s in family.samples}


def test_failed_and_unconfirmed_deliveries_of_routed_alerts_are_exported(db: Database) -> None:
    with db.session() as s:
        enqueue(s, dedupe_key="a1", kind="idle-warning", subject="idle", body="b", now=START)
        enqueue(s, dedupe_key="a2", kind="idle-warning", subject="idle", body="b", now=START)
        for i, status in enumerate(["pending", "failed", "failed", "unconfirmed", "sent"]):
            s.add(AlertDeliveryRow(dedupe_key=f"d{i}", alert_id=1, channel="slack",
                                   target="#finops", status=status, created_at=START,
                                   next_attempt_at=START + timedelta(minutes=i)))
    metrics = DaemonMetrics()
    with db.session() as s:
        metrics.refresh_alerts(s)
    deliveries = _gauge(metrics, "costguard_alert_deliveries")
    assert set(deliveries) == set(DELIVERY_STATUSES)
    assert deliveries["failed"] == 2 and deliveries["unconfirmed"] == 1
    assert deliveries["pending"] == 1 and deliveries["sent"] == 1 and deliveries["held"] == 0
    assert _gauge(metrics, "costguard_alerts")["pending"] == 2


def test_readings_a_cycle_dropped_add_up_per_provider() -> None:
    metrics = DaemonMetrics()
    for dropped in ({"aws": 2}, {}, {"aws": 1, "gcp": 4}):
        metrics.observe_cycle(CycleSummary(cycle_id=1, started_at=START,
                                           readings_dropped=dropped), 1.0)
    text = metrics.render().decode()
    assert 'costguard_cloud_readings_dropped_total{provider="aws"} 3.0' in text
    assert 'costguard_cloud_readings_dropped_total{provider="gcp"} 4.0' in text
