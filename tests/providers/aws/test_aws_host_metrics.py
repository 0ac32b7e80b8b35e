"""The CloudWatch agent's host memory and I/O wait beside the GPUs (aws/host_metrics.py),
against moto: found in both layouts and as roll-ups, asked for in the GPU's own calls, put
on every GPU minute, and carried into the efficiency verdict as measured figures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_helpers import ProviderFactory, run_instances

from costguard.clock import ManualClock
from costguard.providers.aws.host_metrics import host_figures
from costguard.providers.aws.metrics import GPU_UTIL, Series
from costguard.recommend.settings import RecommendSettings
from costguard.telemetry.efficiency import judge
from tests.providers.aws.test_aws_metrics import _calls, _dims, _inventory, _minute, _put

pytestmark = pytest.mark.usefixtures("moto")
GIB = 2**30
G5_XLARGE_MEMORY = 16 * GIB  # DescribeInstanceTypes' MemoryInfo.SizeInMiB: 16384


def _with(raw: dict[str, Any], *more: tuple[str, str], by_host: bool = False
          ) -> list[dict[str, str]]:
    """The agent's dimensions for a host metric: `append_dimensions` (InstanceId, ImageId,
    InstanceType) or, without it, `host` alone; then the plugin's own (`cpu`)."""
    base = ([("host", raw["PrivateDnsName"])] if by_host else
            [("InstanceId", raw["InstanceId"]), ("ImageId", raw["ImageId"]),
             ("InstanceType", raw["InstanceType"])])
    return [{"Name": k, "Value": v} for k, v in (*base, *more)]


def _host_points(raw: dict[str, Any], minutes: list[datetime], *, by_host: bool = False
                 ) -> None:
    _put([{"MetricName": GPU_UTIL, "Dimensions": _dims(raw, 0, with_id=not by_host),
           "Timestamp": when, "Value": 15.0} for when in minutes])
    _put([{"MetricName": "mem_used_percent", "Dimensions": _with(raw, by_host=by_host),
           "Timestamp": when, "Value": 25.0 + n} for n, when in enumerate(minutes)])
    _put([{"MetricName": "cpu_usage_iowait", "Timestamp": when, "Value": value,
           "Dimensions": _with(raw, ("cpu", cpu), by_host=by_host)}
          for when in minutes for cpu, value in (("cpu-total", 31.5), ("cpu0", 97.0))])


@pytest.mark.parametrize("by_host", [False, True], ids=["InstanceId", "host"])
def test_memory_and_io_wait_join_each_gpu_minute_in_the_same_calls(
        make_provider: ProviderFactory, session: boto3.Session, clock: ManualClock,
        by_host: bool) -> None:
    (raw,) = run_instances(itype="g5.xlarge")
    minutes = [_minute(clock, ago) for ago in range(4, 0, -1)]
    _host_points(raw, minutes, by_host=by_host)
    listed, fetched = _calls(session, "ListMetrics"), _calls(session, "GetMetricData")
    provider, instances = _inventory(
        make_provider, cloudwatch={"host_measurements": ["mem_used_percent",
                                                         "cpu_usage_iowait"]})

    rows = provider.gpu_metrics(instances, minutes[0], minutes[-1] + timedelta(minutes=1))

    assert len(fetched) == 1  # beside the GPU's queries, not a call of their own
    # the per-core series are not even listed
    assert [q.get("Dimensions") for q in listed if q["MetricName"] == "cpu_usage_iowait"] == [
        [{"Name": "cpu", "Value": "cpu-total"}]]
    asked = sorted((q["MetricStat"]["Metric"]["MetricName"], q["MetricStat"]["Stat"])
                   for q in fetched[0]["MetricDataQueries"] if q["Id"].startswith("h"))
    # the all-CPU series of I/O wait, never one core's; memory's peak
    assert asked == [("cpu_usage_iowait", "Average"), ("mem_used_percent", "Maximum")]
    assert [r.host_iowait_pct for r in rows] == [31.5] * 4
    assert [r.host_mem_used_bytes for r in rows] == [
        int(G5_XLARGE_MEMORY * pct / 100) for pct in (25.0, 26.0, 27.0, 28.0)]
    assert {r.host_mem_total_bytes for r in rows} == {G5_XLARGE_MEMORY}
    assert {r.util_mean for r in rows} == {15.0}


def test_unasked_host_measurements_are_neither_listed_nor_queried(
        make_provider: ProviderFactory, session: boto3.Session, clock: ManualClock) -> None:
    (raw,) = run_instances(itype="g5.xlarge")
    minutes = [_minute(clock, ago) for ago in range(2, 0, -1)]
    _host_points(raw, minutes)
    listed, fetched = _calls(session, "ListMetrics"), _calls(session, "GetMetricData")
    provider, instances = _inventory(make_provider)

    rows = provider.gpu_metrics(instances, minutes[0], minutes[-1] + timedelta(minutes=1))

    assert {q["MetricName"] for q in listed} == {GPU_UTIL, "nvidia_smi_memory_used",
                                                 "nvidia_smi_memory_total"}
    assert not any(q["Id"].startswith("h") for q in fetched[0]["MetricDataQueries"])
    assert len(rows) == 2 and {r.host_mem_used_bytes for r in rows} == {None}
    assert {r.host_iowait_pct for r in rows} == {None}


def test_rolled_up_host_series_are_asked_for_without_listing(
        make_provider: ProviderFactory, session: boto3.Session, clock: ManualClock) -> None:
    """`aggregation_dimensions: [["InstanceId"]]` rolls the host's series up by instance
    too: one dimension, known from the inventory."""
    (raw,) = run_instances(itype="g5.xlarge")
    when = _minute(clock, 2)
    only_id = [{"Name": "InstanceId", "Value": raw["InstanceId"]}]
    _put([{"MetricName": name, "Dimensions": only_id, "Timestamp": when, "Value": value}
          for name, value in ((GPU_UTIL, 60.0), ("mem_used_percent", 50.0),
                              ("cpu_usage_iowait", 4.0))])
    listed = _calls(session, "ListMetrics")
    provider, instances = _inventory(make_provider, cloudwatch={
        "instance_dimension": True, "rollup_by_instance": True,
        "measurements": ["utilization_gpu"],
        "host_measurements": ["mem_used_percent", "cpu_usage_iowait"]})

    (row,) = provider.gpu_metrics(instances, when, when + timedelta(minutes=1))

    assert listed == []
    assert (row.host_iowait_pct, row.host_mem_used_bytes) == (4.0, G5_XLARGE_MEMORY // 2)


def test_a_type_newer_than_the_shipped_table_takes_its_memory_from_describe_instance_types(
        make_provider: ProviderFactory, clock: ManualClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory the percentage is of comes from DescribeInstanceTypes' MemoryInfo where
    the region answered (a type newer than the shipped table included), is kept with the
    catalog's stored copy, and a copy stored before it was kept falls back to the table."""
    from costguard.providers.aws import gpu_types, host_metrics

    without = {k: v for k, v in gpu_types.shipped_rows().items() if k != "g5.xlarge"}
    table = {k: v for k, v in gpu_types.shipped_gpu_table().items() if k != "g5.xlarge"}
    monkeypatch.setattr(gpu_types, "shipped_rows", lambda: without)
    monkeypatch.setattr(gpu_types, "shipped_gpu_table", lambda: table)
    # wherever the table is read (host_metrics read it itself before the catalog kept memory)
    monkeypatch.setattr(host_metrics, "shipped_rows", lambda: without, raising=False)
    (raw,) = run_instances(itype="g5.xlarge")
    minutes = [_minute(clock, ago) for ago in range(2, 0, -1)]
    _host_points(raw, minutes)
    provider, instances = _inventory(
        make_provider, cloudwatch={"host_measurements": ["mem_used_percent"]})

    rows = provider.gpu_metrics(instances, minutes[0], minutes[-1] + timedelta(minutes=1))

    assert [r.host_mem_used_bytes for r in rows] == [
        int(G5_XLARGE_MEMORY * pct / 100) for pct in (25.0, 26.0)]
    assert provider.gpu_types.known()["g5.xlarge"]["host_memory_mib"] == 16384
    # a restart takes the stored copy; one stored before the memory was kept is not taken
    # (asked again), the shipped table's memory meanwhile
    restarted = gpu_types.GpuTypeCatalog()
    restarted.learn({"g5.xlarge": provider.gpu_types.known()["g5.xlarge"],
                     "p4d.24xlarge": {"count": 8, "model": "NVIDIA A100",
                                      "memory_mib": 40960, "neuron": True}})
    assert set(restarted.known()) == {"g5.xlarge"}
    assert restarted.host_memory_mib("g5.xlarge") == 16384
    assert restarted.host_memory_mib("p4d.24xlarge") == 1179648  # the shipped table's
    assert restarted.host_memory_mib("x9.unknown") is None


def test_memory_of_a_type_not_known_is_left_out_and_odd_points_are_no_figure() -> None:
    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    later = at + timedelta(minutes=1)
    series = [Series("i-1", -1, "mem_used_percent", (("InstanceId", "i-1"),)),
              Series("i-1", -1, "cpu_usage_iowait", (("InstanceId", "i-1"),)),
              Series("i-2", -1, "mem_used_percent", (("InstanceId", "i-2"),)),
              Series("i-2", -1, "mem_used_percent", (("host", "ip-10-0-0-2"),))]
    values = {"h0": [(at, 40.0)], "h1": [(at, float("nan")), (later, 140.0)],
              "h2": [(at, 10.0), (later, float("inf"))], "h3": [(at, 20.0)]}

    got = host_figures(series, values, {"i-1": None, "i-2": G5_XLARGE_MEMORY // 2**20})

    # i-1: no memory (its type's is not known), the NaN no figure, 140 % clamped;
    # i-2: of two series the larger, the infinite point no figure
    assert got == {"i-1": {later: [100.0, None, None]},
                   "i-2": {at: [None, int(G5_XLARGE_MEMORY * 0.2), G5_XLARGE_MEMORY]}}


def test_measured_host_memory_sizes_the_verdict_where_it_was_assumed(
        make_provider: ProviderFactory, clock: ManualClock) -> None:
    """Cloud metrics alone gave the verdict host CPU but no memory; with the agent's memory
    and I/O wait its evidence carries both, and a high I/O wait reads as the host busy."""
    (raw,) = run_instances(itype="g5.xlarge")
    minutes = [_minute(clock, ago) for ago in range(60, 0, -1)]
    _host_points(raw, minutes)
    _put([{"MetricName": "CPUUtilization", "Timestamp": when, "Value": 5.0,
           "Dimensions": [{"Name": "InstanceId", "Value": raw["InstanceId"]}]}
          for when in minutes], namespace="AWS/EC2")
    settings = RecommendSettings(min_hours=0.5)
    verdicts = {}
    for asked in ([], ["mem_used_percent", "cpu_usage_iowait"]):
        provider, instances = _inventory(make_provider,
                                         cloudwatch={"host_measurements": asked})
        rows = provider.gpu_metrics(instances, minutes[0], minutes[-1] + timedelta(minutes=1))
        verdicts[bool(asked)] = judge(rows, window_start=minutes[0],
                                      window_end=minutes[-1] + timedelta(minutes=1),
                                      gpu_count=1, settings=settings)
    before, after = verdicts[False], verdicts[True]
    assert before.host_mem_peak_bytes is None and before.host_iowait_mean is None
    assert after.host_mem_peak_bytes == int(G5_XLARGE_MEMORY * 84 / 100)  # 25 + 59 %
    assert after.host_mem_total_bytes == G5_XLARGE_MEMORY
    assert after.host_iowait_mean == 31.5
    assert any("memory peak" in line for line in after.evidence)
    assert before.bottleneck.value == "latency-bound"  # GPU low, CPU idle
    assert after.bottleneck.value == "data-loading"  # GPU low, the host waiting on I/O


def test_an_answers_memory_past_what_a_reading_holds_is_no_memory() -> None:
    """A DescribeInstanceTypes answer whose MemoryInfo is a 5,000-digit number, negative or
    not a number gives no host memory (I/O wait alone), never a GPU reading refused for a
    host figure past the store's 64-bit columns."""
    from costguard.providers.aws.gpu_types import spec_from_type_info

    gpus = {"Gpus": [{"Name": "A10G", "Manufacturer": "NVIDIA", "Count": 1,
                      "MemoryInfo": {"SizeInMiB": 22888}}]}
    for odd in (10**5000, 2**43, -16384, 0, "16384", 16384.0, None):
        spec = spec_from_type_info({"GpuInfo": gpus, "MemoryInfo": {"SizeInMiB": odd}})
        assert spec.count == 1 and spec.host_memory_mib is None, type(odd)
    largest = spec_from_type_info({"GpuInfo": gpus, "MemoryInfo": {"SizeInMiB": 2**43 - 1}})
    assert largest.host_memory_mib is not None
    assert largest.host_memory_mib * 2**20 <= 2**63 - 1
