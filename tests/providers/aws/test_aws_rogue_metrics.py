"""A CloudWatch point no GPU reading can hold, which anyone allowed PutMetricData in the
account can write (a GPU index past 2**31, memory past 2**63 bytes): it is dropped and
logged, the call's other readings are kept, and the daemon's cycle goes on. Validated as one
list, one such point had failed the call, and with it every cycle. What another host adds
to a busy GPU's series (zeros, or a whole series beside the agent's) cannot make it idle."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_helpers import IDLE_NOTIFY_POLICY, REGION, ProviderFactory, run_instances

from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.policy.load import parse_policy_text
from costguard.providers.aws.metrics import (
    GPU_MEM_USED,
    GPU_UTIL,
    NAMES,
    UTIL_MAX,
    UTIL_MEAN,
    Series,
    as_rows,
    attribute_series,
    gpu_rows,
    host_cpu_of,
)
from costguard.providers.base import Readings
from costguard.providers.cloud_readings import validated
from costguard.store.db import Database
from costguard.store.readings import read_minutes
from tests.providers.policies import idle_cycle

pytestmark = pytest.mark.usefixtures("moto")

# metric, GPU index dimension, value: what no GpuMinute holds, and the field it breaks
ROGUE = {
    "memory past 2**63 bytes": (GPU_MEM_USED, "0", 1e30, "mem_used_bytes"),
    "GPU index past 2**31": (GPU_UTIL, str(2**40), 1.0, "gpu_index"),
    "negative GPU index": (GPU_UTIL, "-7", 1.0, "gpu_index"),
}


def _put(instance_id: str, metric: str, index: str, when: datetime, value: float) -> None:
    cw: Any = boto3.client("cloudwatch", region_name=REGION)
    cw.put_metric_data(Namespace="CWAgent", MetricData=[{
        "MetricName": metric, "Timestamp": when, "Value": value,
        "Dimensions": [{"Name": "InstanceId", "Value": instance_id},
                       {"Name": "index", "Value": index}]}])


def _now(clock: ManualClock) -> datetime:
    return clock.now().replace(second=0, microsecond=0)


@pytest.mark.parametrize("case", sorted(ROGUE))
def test_a_point_no_reading_can_hold_is_dropped_and_the_others_are_kept(
    make_provider: ProviderFactory, clock: ManualClock, caplog: pytest.LogCaptureFixture,
    case: str
) -> None:
    good, rogue = run_instances(count=2, itype="g5.xlarge")
    when = _now(clock) - timedelta(minutes=2)
    _put(good["InstanceId"], GPU_UTIL, "0", when, 3.0)
    metric, index, value, field = ROGUE[case]
    _put(rogue["InstanceId"], metric, index, when, value)
    provider = make_provider(cloudwatch={"instance_dimension": True})
    instances = provider.list_instances().instances

    with caplog.at_level(logging.WARNING, logger="costguard.providers.cloud_readings"):
        rows = provider.gpu_metrics(instances, when, when + timedelta(minutes=1))

    assert [(r.instance_id, r.gpu_index, r.util_mean) for r in rows] == [
        (good["InstanceId"], 0, 3.0)]
    assert isinstance(rows, Readings) and rows.dropped == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "1 GPU reading dropped" in line and "never idle" in line
    assert rogue["InstanceId"] in line and field in line
    assert good["InstanceId"] not in line



def test_the_cycle_goes_on_and_stores_the_others_readings(
    make_provider: ProviderFactory, clock: ManualClock, tmp_path: Path
) -> None:
    good, rogue = run_instances(count=2, itype="g5.xlarge")
    now = _now(clock)
    for ago in range(30, 0, -1):
        _put(good["InstanceId"], GPU_UTIL, "0", now - timedelta(minutes=ago), 50.0)
        _put(rogue["InstanceId"], GPU_UTIL, "0", now - timedelta(minutes=ago), 1.0)
    # one forged point: memory no GPU has, in the rogue's busiest minute
    _put(rogue["InstanceId"], GPU_MEM_USED, "0", now - timedelta(minutes=3), 1e30)
    provider = make_provider(cloudwatch={"instance_dimension": True})
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    engine = Engine(Settings(database_url=db.url, policy_paths=[],
                             alerts=AlertsSettings(console=False)),
                    db, {"aws": provider}, parse_policy_text(IDLE_NOTIFY_POLICY, "p.yml"), clock)

    summary = engine.run_cycle()

    with db.session() as s:
        stored = read_minutes(s, [("aws", good["InstanceId"]), ("aws", rogue["InstanceId"])],
                              now - timedelta(minutes=30), now)
    # the busy one's recent quarter hour decides it (a cold cycle's split, no older minute)
    assert len(stored[("aws", good["InstanceId"])]) == 15
    # the idle-looking one's half hour is kept but the forged minute: no data there
    rogue_minutes = {r.minute for r in stored[("aws", rogue["InstanceId"])]}
    assert rogue_minutes == {now - timedelta(minutes=ago) for ago in range(30, 0, -1)
                             if ago != 3}
    assert summary.readings == 15 + 29
    assert summary.readings_dropped == {"aws": 1}
    assert ("readings dropped, not valid (no data, never idle; the log names them): aws 1"
            in summary.lines())
    db.dispose()


def _dilute(instance_id: str, gpu: int, when: datetime, samples: int) -> None:
    """What any host allowed PutMetricData can add to another GPU's series: one
    StatisticValues set of `samples` zeros in the minute."""
    cw: Any = boto3.client("cloudwatch", region_name=REGION)
    cw.put_metric_data(Namespace="CWAgent", MetricData=[{
        "MetricName": GPU_UTIL, "Timestamp": when,
        "StatisticValues": {"SampleCount": samples, "Sum": 0.0, "Minimum": 0.0,
                            "Maximum": 0.0},
        "Dimensions": [{"Name": "InstanceId", "Value": instance_id},
                       {"Name": "index", "Value": str(gpu)}]}])


@pytest.mark.parametrize("itype", ["g5.xlarge", "g5.12xlarge"])
def test_zeros_added_to_a_busy_gpus_series_do_not_make_it_idle(
    make_provider: ProviderFactory, clock: ManualClock, tmp_path: Path, itype: str
) -> None:
    # A busy GPU's per-GPU series, and a thousand zeros a minute added to it by another host:
    # its Average reads 0.04 %, under any idle threshold. Its Maximum, which added points can
    # only raise, still reads 40 %, and the Maximum decides. The idle one is still found.
    busy, idle = run_instances(count=2, itype=itype)
    gpus = 4 if itype == "g5.12xlarge" else 1
    now = _now(clock)
    for ago in range(30, 0, -1):
        when = now - timedelta(minutes=ago)
        for gpu in range(gpus):
            _put(busy["InstanceId"], GPU_UTIL, str(gpu), when, 40.0)
            _put(idle["InstanceId"], GPU_UTIL, str(gpu), when, 1.0)
            _dilute(busy["InstanceId"], gpu, when, 1000)
    found, diluted = idle_cycle("aws", make_provider(cloudwatch={"instance_dimension": True}),
                                clock, tmp_path, busy["InstanceId"])

    assert found == {idle["InstanceId"]}
    assert diluted and [(r.util_mean, r.util_max) for r in diluted] == [
        (pytest.approx(40.0 / 1001), 40.0)] * len(diluted)


# what the agent writes, and a series another host adds claiming the same GPU with zeros
CLAIMS = {
    "an InstanceId series beside the agent's host series": (
        lambda raw: [("host", raw["PrivateDnsName"]), ("index", "0"), ("name", "NVIDIA A10G")],
        lambda raw: [("InstanceId", raw["InstanceId"]), ("index", "0")]),
    "a per-GPU series beside the agent's roll-up": (
        lambda raw: [("InstanceId", raw["InstanceId"])],
        lambda raw: [("InstanceId", raw["InstanceId"]), ("index", "0")]),
    "a series that differs from the agent's in one dimension": (
        lambda raw: [("InstanceId", raw["InstanceId"]), ("index", "0"), ("name", "NVIDIA A10G")],
        lambda raw: [("InstanceId", raw["InstanceId"]), ("index", "0"), ("name", "A10G")]),
}


@pytest.mark.parametrize("case", sorted(CLAIMS))
def test_a_series_added_for_a_busy_gpu_does_not_stand_in_for_the_agents(
    make_provider: ProviderFactory, clock: ManualClock, tmp_path: Path, case: str
) -> None:
    # Picked one series a GPU, an added series could replace the agent's: zeros for a busy
    # GPU, warned, then stopped. Every series that claims the GPU is read, and the busier
    # reading of each minute wins.
    busy, idle = run_instances(count=2, itype="g5.xlarge")
    agent, added = CLAIMS[case]
    cw: Any = boto3.client("cloudwatch", region_name=REGION)
    now = _now(clock)
    for ago in range(30, 0, -1):
        when = now - timedelta(minutes=ago)
        cw.put_metric_data(Namespace="CWAgent", MetricData=[
            {"MetricName": GPU_UTIL, "Timestamp": when, "Value": value,
             "Dimensions": [{"Name": k, "Value": v} for k, v in dims]}
            for dims, value in ((agent(busy), 40.0), (added(busy), 0.0), (agent(idle), 1.0))])
    # the default layout, "auto": both kinds of series
    found, stored = idle_cycle("aws", make_provider(), clock, tmp_path, busy["InstanceId"])

    assert found == {idle["InstanceId"]}
    assert {(r.util_mean, r.util_max) for r in stored} == {(40.0, 40.0)}


@pytest.mark.parametrize("order", [1, -1])
def test_every_series_that_claims_a_gpu_is_read_whatever_order_they_are_listed_in(
        order: int) -> None:
    # ListMetrics lists in no order anyone promises: both series are read either way
    agent = (("InstanceId", "i-a"), ("index", "0"), ("name", "NVIDIA A10G"))
    added = (("InstanceId", "i-a"), ("index", "0"), ("name", "A10G"))
    rollup = (("InstanceId", "i-a"),)
    listed = [agent, added, rollup][::order]
    got = attribute_series({GPU_UTIL: listed}, {"i-a"}, {}, "auto")
    assert sorted(s.dimensions for s in got) == sorted(listed)
    assert {(s.instance_id, s.gpu_index) for s in got} == {("i-a", 0), ("i-a", -1)}


def test_the_busier_reading_of_a_minute_wins_and_a_nan_is_kept_for_validation() -> None:
    when = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
    series = [Series("i-a", 0, GPU_UTIL, (("n", "1"),)),
              Series("i-a", 0, GPU_UTIL, (("n", "2"),)),
              Series("i-b", 0, GPU_UTIL, (("n", "1"),)),
              Series("i-b", 0, GPU_UTIL, (("n", "2"),))]
    values = {"g0": [(when, 30.0)], "m0": [(when, 60.0)], "g1": [(when, 50.0)],
              "m1": [(when, 55.0)], "g2": [(when, 1.0)], "g3": [(when, math.nan)]}
    rows = gpu_rows(series, values, period_s=60)
    a, b = rows[("i-a", 0, when)], rows[("i-b", 0, when)]
    assert (a[UTIL_MEAN], a[UTIL_MAX]) == (50.0, 60.0)
    assert math.isnan(b[UTIL_MEAN])
    assert [r.instance_id for r in validated(NAMES, as_rows(rows), "test")] == ["i-a"]


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_value_that_is_not_a_number_is_no_data_not_an_idle_gpu(value: float) -> None:
    # CloudWatch stores no NaN or infinity, but its JSON answer is read with json.loads,
    # which takes both; clamped as a percentage, NaN had read as 0 %: an idle GPU
    when = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
    series = [Series("i-a", 0, GPU_UTIL, ()), Series("i-b", 0, GPU_UTIL, ()),
              Series("i-b", 0, GPU_MEM_USED, ())]
    rows = gpu_rows(series, {"g0": [(when, value)], "g1": [(when, 9.0)], "g2": [(when, value)]},
                    period_s=60)
    kept = validated(NAMES, as_rows(rows), "test")
    assert [(r.instance_id, r.util_mean) for r in kept] == (
        [("i-a", 100.0)] if value == math.inf else [])  # infinity clamps; NaN is refused


def test_a_host_cpu_that_is_not_a_number_leaves_the_gpu_minute_without_one() -> None:
    when = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
    cpu = host_cpu_of(["i-a"], {"c0": [(when, math.nan)]})
    rows = gpu_rows([Series("i-a", 0, GPU_UTIL, ())], {"g0": [(when, 40.0)]},
                    period_s=60, host_cpu=cpu)
    (kept,) = validated(NAMES, as_rows(rows), "test")
    assert (kept.util_mean, kept.host_cpu_pct) == (40.0, None)
