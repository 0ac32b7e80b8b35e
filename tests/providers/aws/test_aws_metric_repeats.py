"""The settling span CloudWatch is asked for again each cycle brings, once the engine stored
the earlier call's readings, only what changed: against moto, and through the engine, where a
cycle whose store failed leaves nothing out of the next."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_helpers import IDLE_NOTIFY_POLICY, REGION, ProviderFactory, run_instances

from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.model import GpuMinute
from costguard.policy.load import parse_policy_text
from costguard.providers.aws.metrics import GPU_UTIL
from costguard.store.db import Database
from costguard.store.readings import read_minutes

pytestmark = pytest.mark.usefixtures("moto")


def _put(instance_id: str, points: dict[datetime, float]) -> None:
    cw: Any = boto3.client("cloudwatch", region_name=REGION)
    cw.put_metric_data(Namespace="CWAgent", MetricData=[
        {"MetricName": GPU_UTIL, "Timestamp": when, "Value": value,
         "Dimensions": [{"Name": "InstanceId", "Value": instance_id}]}
        for when, value in points.items()])


def _minutes(clock: ManualClock, ago: range) -> list[datetime]:
    now = clock.now().replace(second=0, microsecond=0)
    return [now - timedelta(minutes=m) for m in ago]


def _seen(rows: list[GpuMinute]) -> list[tuple[datetime, float | None]]:
    return [(r.minute, r.util_mean) for r in rows]


def test_a_stored_call_is_not_returned_again_unless_it_changed(
    make_provider: ProviderFactory, clock: ManualClock
) -> None:
    (raw,) = run_instances(itype="g5.xlarge")
    minutes = _minutes(clock, range(10, 0, -1))  # the settling span
    _put(raw["InstanceId"], {m: 50.0 for m in minutes})
    provider = make_provider(cloudwatch={"instance_dimension": True})
    instances = provider.list_instances().instances
    start, end = minutes[0], minutes[-1] + timedelta(minutes=1)

    assert len(provider.gpu_metrics(instances, start, end)) == 10
    # never confirmed: a caller that does not say it stored them gets them all again
    stored = provider.gpu_metrics(instances, start, end)
    assert len(stored) == 10
    provider.readings_stored(stored)
    assert provider.gpu_metrics(instances, start, end) == []
    # a late point changes one minute's average; a new minute arrives
    _put(raw["InstanceId"], {minutes[-3]: 70.0, end: 40.0})
    rows = provider.gpu_metrics(instances, start, end + timedelta(minutes=1))
    assert _seen(rows) == [(minutes[-3], 60.0), (end, 40.0)]


def test_a_cycle_whose_store_failed_leaves_nothing_out_of_the_next(
    make_provider: ProviderFactory, clock: ManualClock, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    (raw,) = run_instances(itype="g5.xlarge")
    instance_id = raw["InstanceId"]
    _put(instance_id, {m: 50.0 for m in _minutes(clock, range(30, 0, -1))})
    provider = make_provider(cloudwatch={"instance_dimension": True})
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    engine = Engine(Settings(database_url=db.url, policy_paths=[],
                             alerts=AlertsSettings(console=False)),
                    db, {"aws": provider}, parse_policy_text(IDLE_NOTIFY_POLICY, "p.yml"), clock)
    t0 = clock.now().replace(second=0, microsecond=0)
    engine.run_cycle()  # cold: the recent quarter hour (busy: no older minute needed)

    def five_more() -> None:
        _put(instance_id, {m: 50.0 for m in _minutes(clock, range(5, 0, -1))})

    clock.advance(timedelta(minutes=5))
    five_more()
    # steady: the 10 settling minutes come back unchanged and are left out
    assert engine.run_cycle().readings == 5

    clock.advance(timedelta(minutes=5))
    five_more()

    def failing(*_: Any, **__: Any) -> int:
        raise OSError("disk full")

    monkeypatch.setattr("costguard.engine.cycle.write_minutes", failing)
    with pytest.raises(OSError):
        engine.run_cycle()
    monkeypatch.undo()  # the store is back
    clock.advance(timedelta(minutes=5))
    five_more()
    summary = engine.run_cycle()

    # the failed cycle's five minutes were asked again and stored, with the new five
    assert summary.readings == 10
    with db.session() as s:
        stored = read_minutes(s, [("aws", instance_id)], t0 - timedelta(minutes=15),
                              clock.now())[("aws", instance_id)]
    assert sorted(r.minute for r in stored) == [
        t0 + timedelta(minutes=m) for m in range(-15, 15)]
    db.dispose()
