"""The host beside the GPUs from the Ops Agent, through the real MetricServiceClient against
the local gRPC fake: memory in use and CPU time waiting on I/O join each GPU minute, in the
series shapes the agent writes (GoogleCloudPlatform/ops-agent
integration_test/ops_agent_test/agent_metrics/metadata.yaml: `memory/bytes_used` labelled
`state` of buffered|cached|free|slab|used; `cpu/utilization` labelled `cpu_state` of
idle|interrupt|nice|softirq|steal|system|user|wait and a blank `cpu_number`, the agent's
mean over the CPUs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta

from costguard.demo.gcp_fake.monitoring import FakeSeries
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.metrics import HOST_CPU, HOST_CPU_STATES, HOST_MEM, UTIL
from costguard.recommend.settings import RecommendSettings
from costguard.telemetry.efficiency import judge
from tests.providers.gcp.test_gcp_metrics import T0, _every_20s, _instance

GIB = 2**30
A2_HIGHGPU_2G = 170 * GIB  # machine_types.json (the shapes `_instance` makes)
MEMORY = {"used": 48 * GIB, "free": 100 * GIB, "buffered": GIB, "cached": 20 * GIB,
          "slab": 2 * GIB}
CPU_STATES = {"idle": 40.0, "interrupt": 0.0, "nice": 0.0, "softirq": 0.5, "steal": 0.0,
              "system": 4.5, "user": 20.0, "wait": 35.0}


def _host_series(fake: FakeGcp, instance_id: str, metric_type: str, labels: dict[str, str],
                 value: float, minutes: int) -> None:
    fake.monitoring.series.append(FakeSeries(
        project="ml-prod", metric_type=metric_type,
        resource_labels={"project_id": "ml-prod", "instance_id": instance_id,
                         "zone": "us-central1-a"},
        metric_labels=labels,
        points=[(T0 + timedelta(seconds=60 * m + 30), value) for m in range(minutes)]))


def _ops_agent_host(fake: FakeGcp, instance_id: str, minutes: int, *,
                    memory: dict[str, float] | None = None) -> None:
    for state, used in (memory or MEMORY).items():
        _host_series(fake, instance_id, HOST_MEM, {"state": state}, used, minutes)
    for state, share in CPU_STATES.items():
        _host_series(fake, instance_id, HOST_CPU_STATES,
                     {"cpu_number": "", "cpu_state": state}, share, minutes)


def _minutes(start: datetime, n: int) -> list[datetime]:
    return [start + timedelta(minutes=m) for m in range(n)]


def test_the_ops_agent_s_memory_and_io_wait_join_each_gpu_minute(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    vm = _instance("1001")
    for gpu in range(2):
        fake.monitoring.add_gpu_series("ml-prod", UTIL, "1001", _every_20s(3, 40.0),
                                       gpu_number=gpu)
    _ops_agent_host(fake, "1001", 2)
    # the legacy Monitoring agent's series per CPU: one core's wait, not the host's
    for cpu in range(4):
        _host_series(fake, "1001", HOST_CPU_STATES,
                     {"cpu_number": str(cpu), "cpu_state": "wait"}, 99.0, 2)
    provider = make_provider(projects=["ml-prod"])
    minutes = provider.gpu_metrics([vm], T0, T0 + timedelta(minutes=3))
    got = sorted((m.minute, m.gpu_index, m.host_mem_used_bytes, m.host_mem_total_bytes,
                  m.host_iowait_pct) for m in minutes)
    # the total: the machine type's memory (a2-highgpu-2g: 170 GB), beside a measured use
    assert got == [(t, gpu, 48 * GIB, A2_HIGHGPU_2G, 35.0) if t < T0 + timedelta(minutes=2)
                   else (t, gpu, None, None, None) for t in _minutes(T0, 3) for gpu in range(2)]
    filters = {r.filter for r in fake.monitoring.requests}
    assert (f'metric.type = "{HOST_MEM}" AND resource.type = "gce_instance" '
            'AND metric.labels.state = "used"') in filters
    assert (f'metric.type = "{HOST_CPU_STATES}" AND resource.type = "gce_instance" '
            'AND metric.labels.cpu_state = "wait"') in filters


def test_the_host_alone_makes_no_gpu_minute_and_odd_values_are_no_figure(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    """A VM whose agent reports the host but no GPU has no GPU minute for it; memory past
    what a reading's 64-bit column holds, or a host figure that is not a number (Compute
    Engine's CPU too), is no figure rather than a GPU minute refused for it."""
    quiet, odd, nan = _instance("2001"), _instance("2002"), _instance("2003")
    _ops_agent_host(fake, "2001", 2)
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "2002", _every_20s(2, 40.0))
    _ops_agent_host(fake, "2002", 2, memory={"used": 2.0**70})
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "2003", _every_20s(2, 40.0))
    _host_series(fake, "2003", HOST_MEM, {"state": "used"}, math.nan, 2)
    _host_series(fake, "2003", HOST_CPU_STATES, {"cpu_number": "", "cpu_state": "wait"},
                 math.nan, 2)
    _host_series(fake, "2003", HOST_CPU, {"instance_name": "vm-2003"}, math.nan, 2)
    provider = make_provider(projects=["ml-prod"])
    minutes = provider.gpu_metrics([quiet, odd, nan], T0, T0 + timedelta(minutes=2))
    assert sorted((m.instance_id, m.host_mem_used_bytes, m.host_mem_total_bytes,
                   m.host_iowait_pct, m.host_cpu_pct) for m in minutes) == [
        ("2002", None, None, 35.0, None), ("2002", None, None, 35.0, None),
        ("2003", None, None, None, None), ("2003", None, None, None, None)]
    assert provider.metric_gaps == []


def test_measured_host_figures_make_a_waiting_host_a_data_loading_verdict(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    """Compute Engine's own CPU gave the verdict a quiet host (latency-bound); with the Ops
    Agent's I/O wait the GPUs are seen waiting on data, and the memory peak is measured."""
    vm = _instance("3001").model_copy(update={"gpu_count": 1})
    hour = 60
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "3001", _every_20s(hour, 12.0))
    _host_series(fake, "3001", HOST_CPU, {"instance_name": "vm-3001"}, 0.05, hour)
    settings = RecommendSettings(min_hours=0.5)
    end = T0 + timedelta(minutes=hour)
    verdicts = []
    for with_agent in (False, True):
        if with_agent:
            _ops_agent_host(fake, "3001", hour)
        provider = make_provider(projects=["ml-prod"])
        rows = provider.gpu_metrics([vm], T0, end)
        verdicts.append(judge(rows, window_start=T0, window_end=end, gpu_count=1,
                              settings=settings))
    before, after = verdicts
    assert before.bottleneck.value == "latency-bound"  # GPU low, CPU idle, nothing else
    assert before.host_mem_peak_bytes is None and before.host_iowait_mean is None
    assert after.bottleneck.value == "data-loading"  # GPU low, the host waiting on I/O
    assert after.host_iowait_mean == 35.0 and after.host_mem_peak_bytes == 48 * GIB
    assert after.host_mem_total_bytes == A2_HIGHGPU_2G
    assert any("memory peak" in line for line in after.evidence)


def test_host_metrics_false_asks_for_the_gpus_and_compute_engine_s_cpu_alone(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "4001", _every_20s(2, 40.0))
    _ops_agent_host(fake, "4001", 2)
    provider = make_provider(projects=["ml-prod"], host_metrics=False)
    minutes = provider.gpu_metrics([_instance("4001")], T0, T0 + timedelta(minutes=2))
    assert [(m.host_mem_used_bytes, m.host_iowait_pct) for m in minutes] == [(None, None)] * 2
    assert len(fake.monitoring.requests) == 8
    assert {HOST_MEM, HOST_CPU_STATES}.isdisjoint(fake.monitoring.calls)
