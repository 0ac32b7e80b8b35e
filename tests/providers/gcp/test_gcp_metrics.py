"""GPU metrics through the real MetricServiceClient against the local gRPC fake."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import grpc  # type: ignore[import-untyped]
import pytest

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.errors import ProviderError
from costguard.model import Instance, InstanceState, TelemetrySource
from costguard.providers.base import Readings
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.metrics import MEM_USED, SM_V1, SM_V2, UTIL

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


def _instance(instance_id: str, project: str = "ml-prod") -> Instance:
    return Instance(
        provider="gcp",
        account=project,
        region="us-central1",
        zone="us-central1-a",
        instance_id=instance_id,
        name=f"vm-{instance_id}",
        instance_type="a2-highgpu-2g",
        state=InstanceState.RUNNING,
        gpu_count=2,
        gpu_model="A100",
        launch_time=T0,
        observed_at=T0,
    )


def _every_20s(minutes: int, value: float) -> list[tuple[datetime, float]]:
    return [(T0 + timedelta(seconds=20 * i + 5), value) for i in range(minutes * 3)]


def test_one_call_per_project_per_metric_type_not_per_instance(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    instances = [_instance(str(1000 + i)) for i in range(30)]
    instances += [_instance(str(2000 + i), "ml-research") for i in range(30)]
    for inst in instances:
        for gpu in range(2):
            fake.monitoring.add_gpu_series(
                inst.account, UTIL, inst.instance_id, _every_20s(5, 40.0), gpu_number=gpu
            )
    provider = make_provider(projects=["ml-prod", "ml-research"])
    minutes = provider.gpu_metrics(instances, T0, T0 + timedelta(minutes=5))
    assert len(minutes) == 60 * 2 * 5
    # 2 projects x 10 reads: 7 metric types (the host's CPU, memory and CPU states too), the
    # 3 that can decide idleness twice (their mean, and their maximum, which decides)
    assert len(fake.monitoring.requests) == 2 * 10
    assert sorted(fake.monitoring.calls.values()) == [2, 2, 2, 2, 4, 4, 4]
    for request in fake.monitoring.requests:
        assert 'resource.type = "gce_instance"' in request.filter
        assert request.aggregation.alignment_period == timedelta(seconds=60)


def test_sm_activity_is_preferred_and_util_and_memory_fill_their_fields(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    inst = _instance("77")
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "77", _every_20s(3, 100.0))
    fake.monitoring.add_gpu_series("ml-prod", SM_V2, "77", _every_20s(3, 0.03))
    fake.monitoring.add_gpu_series("ml-prod", SM_V1, "77", _every_20s(3, 0.9))  # older agent
    fake.monitoring.add_gpu_series(
        "ml-prod",
        MEM_USED,
        "77",
        _every_20s(3, 2**30),
        integer=True,
        extra_labels={"memory_state": "used"},
    )
    fake.monitoring.add_gpu_series(
        "ml-prod",
        MEM_USED,
        "77",
        _every_20s(3, 2**34),
        integer=True,
        extra_labels={"memory_state": "free"},
    )
    # in the order the series came, not sorted (the classifier and the store need none)
    minutes = sorted(make_provider().gpu_metrics([inst], T0, T0 + timedelta(minutes=3)),
                     key=lambda m: m.minute)
    assert [m.minute for m in minutes] == [T0 + timedelta(minutes=i) for i in range(3)]
    assert all(type(m.minute) is datetime for m in minutes)  # not proto-plus's subclass
    for m in minutes:
        assert m.source == TelemetrySource.CLOUD_MONITORING
        assert m.instance_id == "77" and m.gpu_index == 0
        assert m.util_mean == pytest.approx(100.0)  # a busy-looking kernel loop ...
        assert m.sm_mean == pytest.approx(3.0)  # ... that keeps 3% of SMs busy (DCGM v2 wins)
        assert m.mem_used_bytes == 2**30  # the "used" series, not "free"


def test_older_dcgm_sm_metric_is_used_when_v2_is_absent(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.monitoring.add_gpu_series("ml-prod", SM_V1, "5", _every_20s(2, 0.5))
    minutes = make_provider().gpu_metrics([_instance("5")], T0, T0 + timedelta(minutes=2))
    assert [m.sm_mean for m in minutes] == [pytest.approx(50.0)] * 2
    assert all(m.util_mean is None for m in minutes)


def test_percentages_outside_0_to_100_are_kept_inside_and_bytes_are_not_capped(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    """An agent's rounding or a counter reset can put a ratio past 1 or below 0: the
    reading is kept at the bound, never refused (memory in bytes has no upper bound)."""
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "8", _every_20s(1, 104.0))
    fake.monitoring.add_gpu_series("ml-prod", SM_V2, "8", _every_20s(1, -0.02))
    fake.monitoring.add_gpu_series("ml-prod", MEM_USED, "8", _every_20s(1, 2**40),
                                   integer=True, extra_labels={"memory_state": "used"})
    (m,) = make_provider().gpu_metrics([_instance("8")], T0, T0 + timedelta(minutes=1))
    assert (m.util_mean, m.sm_mean, m.mem_used_bytes) == (100.0, 0.0, 2**40)


@pytest.mark.parametrize(("metric", "value", "labels", "field"), [
    (MEM_USED, 1e30, {"memory_state": "used"}, "mem_used_bytes"),  # past 2**63 bytes
    (MEM_USED, math.inf, {"memory_state": "used"}, "mem_used_bytes"),
    (UTIL, math.nan, {}, "util_mean"),  # not 0 %: that would read as idle
    (UTIL, 5.0, {"gpu_number": str(2**40)}, "gpu_index"),
])
def test_a_point_no_reading_can_hold_is_dropped_and_the_others_are_kept(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider], caplog: pytest.LogCaptureFixture,
    metric: str, value: float, labels: dict[str, str], field: str
) -> None:
    """Anyone who may write the project's time series can write any value or label: one
    point no GpuMinute holds had failed the whole call (and every cycle after)."""
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "1", _every_20s(2, 40.0))
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "2", _every_20s(2, 30.0))
    fake.monitoring.add_gpu_series("ml-prod", metric, "2", _every_20s(1, value),
                                   extra_labels=labels)
    with caplog.at_level(logging.WARNING, logger="costguard.providers.cloud_readings"):
        minutes = make_provider().gpu_metrics([_instance("1"), _instance("2")], T0,
                                              T0 + timedelta(minutes=2))
    got = sorted((m.instance_id, m.gpu_index, m.minute, m.util_mean) for m in minutes)
    # the rogue point's GPU-minute has no data; a point of a GPU of its own is that GPU's
    kept_t0 = [("2", 0, T0, 30.0)] if "gpu_number" in labels else []
    assert got == [("1", 0, T0, 40.0), ("1", 0, T0 + timedelta(minutes=1), 40.0),
                   *kept_t0, ("2", 0, T0 + timedelta(minutes=1), 30.0)]
    (line,) = [r.getMessage() for r in caplog.records]
    assert "1 GPU reading dropped" in line and field in line and "at 2026-11-23 10:00Z" in line
    assert isinstance(minutes, Readings) and minutes.dropped == 1


def test_a_series_whose_gpu_number_is_not_a_number_is_no_gpus(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "1", _every_20s(1, 40.0),
                                   extra_labels={"gpu_number": "zero"})
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "1", _every_20s(1, 20.0), gpu_number=1)
    (m,) = make_provider().gpu_metrics([_instance("1")], T0, T0 + timedelta(minutes=1))
    assert (m.gpu_index, m.util_mean) == (1, 20.0)


def test_instances_without_metrics_get_no_rows_and_others_are_ignored(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "not-asked-for", _every_20s(2, 10.0))
    minutes = make_provider().gpu_metrics([_instance("silent")], T0, T0 + timedelta(minutes=2))
    assert minutes == []


def test_one_minute_means_are_aligned_on_the_server(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    points = [
        (T0 + timedelta(seconds=10), 10.0),
        (T0 + timedelta(seconds=50), 30.0),
        (T0 + timedelta(seconds=70), 90.0),
    ]
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "9", points, gpu_number=1)
    minutes = sorted(make_provider().gpu_metrics([_instance("9")], T0,
                                                 T0 + timedelta(minutes=2)),
                     key=lambda m: m.minute)
    assert [(m.minute, m.gpu_index) for m in minutes] == [(T0, 1), (T0 + timedelta(minutes=1), 1)]
    assert [m.util_mean for m in minutes] == pytest.approx([20.0, 90.0])


def test_unavailable_monitoring_is_retried(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "3", _every_20s(1, 5.0))
    fake.monitoring.fail_next(grpc.StatusCode.UNAVAILABLE, times=2)
    minutes = make_provider().gpu_metrics([_instance("3")], T0, T0 + timedelta(minutes=1))
    assert [m.util_mean for m in minutes] == [pytest.approx(5.0)]


def test_throttled_monitoring_is_retried_and_leaves_no_gap() -> None:
    """Monitoring refusing calls with RESOURCE_EXHAUSTED (its quota error; the org-scale
    bench's pace): each is asked again, and every project's readings come back."""
    with FakeGcp() as paced:
        paced.monitoring.stop()
        paced.monitoring.throttle = 0.5
        paced.monitoring.latency_s = 0.01
        paced.monitoring.start()
        projects = [f"proj-{k}" for k in range(4)]
        instances = [_instance(str(100 + k), p) for k, p in enumerate(projects)]
        for inst in instances:
            paced.monitoring.add_gpu_series(inst.account, UTIL, inst.instance_id,
                                            _every_20s(2, 30.0))
        provider = GcpProvider(paced.settings(projects=projects))
        minutes = provider.gpu_metrics(instances, T0, T0 + timedelta(minutes=2))
        provider.close()
    assert paced.monitoring.throttled > 0
    assert provider.metric_gaps == []
    assert len(minutes) == 4 * 2
    # a refused call is not answered, so not counted: each read once per project
    assert len(paced.monitoring.requests) == 4 * 10


def test_denied_monitoring_raises_a_provider_error_that_says_what_to_grant(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.monitoring.fail_next(grpc.StatusCode.PERMISSION_DENIED, times=1)
    with pytest.raises(ProviderError, match="permission denied in project ml-prod"):
        make_provider().gpu_metrics([_instance("3")], T0, T0 + timedelta(minutes=1))


@pytest.mark.parametrize("refused", [99, 1])
def test_a_project_whose_metrics_fail_is_a_gap_while_others_are_returned(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider], refused: int
) -> None:
    # with one of its queries refused, what the others brought is dropped with it (its
    # queries are asked side by side): a project half read is no data, not its other half
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "1", _every_20s(1, 5.0))
    fake.monitoring.add_gpu_series("ml-research", UTIL, "2", _every_20s(1, 5.0))
    fake.monitoring.fail_next(grpc.StatusCode.PERMISSION_DENIED, times=refused,
                              project="ml-research")
    provider = make_provider(projects=["ml-prod", "ml-research"])
    minutes = provider.gpu_metrics(
        [_instance("1"), _instance("2", "ml-research")], T0, T0 + timedelta(minutes=1)
    )
    assert [m.instance_id for m in minutes] == ["1"]
    assert [g.scope for g in provider.metric_gaps] == ["ml-research"]
    # all ten asked at once
    assert len([r for r in fake.monitoring.requests if r.name == "projects/ml-research"]) == 10


def test_a_projects_queries_are_asked_side_by_side() -> None:
    """At a real API's pace a project's queries one after another (eight then) were eight
    round trips: a first cycle's few projects a call made that chain most of its telemetry."""
    with FakeGcp() as paced:
        paced.monitoring.stop()
        paced.monitoring.latency_s = 0.2
        paced.monitoring.start()
        paced.monitoring.add_gpu_series("solo-project", UTIL, "7", _every_20s(2, 30.0))
        provider = GcpProvider(paced.settings(projects=["solo-project"]))
        minutes = provider.gpu_metrics([_instance("7", "solo-project")], T0,
                                       T0 + timedelta(minutes=2))
        provider.close()
    assert len(minutes) == 2 and provider.metric_gaps == []
    assert len(paced.monitoring.requests) == 10
    assert paced.monitoring.most_at_once >= 4  # one at a time, it was 1


def test_host_cpu_of_compute_engine_joins_each_gpu_minute(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    from costguard.demo.gcp_fake.monitoring import FakeSeries
    from costguard.providers.gcp.metrics import HOST_CPU

    gpu_vm, other = _instance("1001"), _instance("1002")
    for gpu in range(2):
        fake.monitoring.add_gpu_series("ml-prod", UTIL, "1001", _every_20s(3, 40.0),
                                       gpu_number=gpu)
    # Compute Engine's own series: a ratio per instance, labelled instance_name, no GPU;
    # one for a VM not asked about, whose CPU must not make GPU minutes
    for iid, ratio in (("1001", 0.9125), ("1002", 0.5)):
        fake.monitoring.series.append(FakeSeries(
            project="ml-prod", metric_type=HOST_CPU,
            resource_labels={"project_id": "ml-prod", "instance_id": iid,
                             "zone": "us-central1-a"},
            metric_labels={"instance_name": f"vm-{iid}"},
            points=[(T0 + timedelta(seconds=60 * m + 30), ratio) for m in range(2)]))
    provider = make_provider(projects=["ml-prod"])
    minutes = provider.gpu_metrics([gpu_vm], T0, T0 + timedelta(minutes=3))
    got = sorted((m.minute, m.gpu_index, m.host_cpu_pct) for m in minutes)
    assert got == [(T0 + timedelta(minutes=m), gpu, 91.25 if m < 2 else None)
                   for m in range(3) for gpu in range(2)]
    assert other.instance_id not in {m.instance_id for m in minutes}


def test_readings_stored_before_come_back_only_when_they_changed(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    inst = _instance("42")
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "42", _every_20s(5, 40.0))
    provider = make_provider()
    span = (T0, T0 + timedelta(minutes=5))
    assert len(provider.gpu_metrics([inst], *span)) == 5
    stored = provider.gpu_metrics([inst], *span)
    assert len(stored) == 5  # never said stored: all again
    provider.readings_stored(stored)
    assert provider.gpu_metrics([inst], *span) == []
    # the fourth minute now reads otherwise (a later series for the same GPU); a sixth
    # minute arrives
    fake.monitoring.add_gpu_series("ml-prod", UTIL, "42", [
        (T0 + timedelta(minutes=3, seconds=50), 100.0),
        (T0 + timedelta(minutes=5, seconds=5), 9.0)])
    minutes = provider.gpu_metrics([inst], T0, T0 + timedelta(minutes=6))
    assert [(m.minute - T0, m.util_mean) for m in minutes] == [
        (timedelta(minutes=3), 100.0), (timedelta(minutes=5), 9.0)]
