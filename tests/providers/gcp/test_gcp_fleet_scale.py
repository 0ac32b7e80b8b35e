"""Fleet scale: 3,000 instances across 20 zones, one inventory + metrics pass."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.metrics import SM_V2, UTIL

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
REGIONS = ["us-central1", "us-east1", "europe-west4", "asia-southeast1", "us-west1"]
ZONES = [f"{r}-{z}" for r in REGIONS for z in "abcd"]  # 20 zones
PROJECTS = ["fleet-one", "fleet-two", "fleet-three"]


@pytest.mark.slow
def test_three_thousand_instances_in_one_inventory_and_metrics_pass(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    minutes = 5
    points = [(T0 + timedelta(seconds=60 * i + 30), 1.0) for i in range(minutes)]
    for i in range(3000):
        project = PROJECTS[i % 3]
        vm = fake.compute.add_instance(
            project, ZONES[i % 20], f"gpu-{i:04d}", "a2-highgpu-1g", spot=i % 4 == 0
        )
        fake.monitoring.add_gpu_series(project, UTIL, str(vm.id), points, zone=vm.zone)
        fake.monitoring.add_gpu_series(project, SM_V2, str(vm.id), points, zone=vm.zone)
    provider = make_provider(projects=PROJECTS)

    started = time.perf_counter()
    inventory = provider.list_instances()
    listed = time.perf_counter()
    readings = provider.gpu_metrics(inventory.instances, T0, T0 + timedelta(minutes=minutes))
    done = time.perf_counter()

    print(
        f"\ngcp fleet: {len(inventory.instances)} instances in {listed - started:.2f} s "
        f"({fake.compute.calls['GET aggregated_list']} list pages); "
        f"{len(readings)} GPU-minutes in {done - listed:.2f} s "
        f"({sum(fake.monitoring.calls.values())} queries, "
        f"{len(fake.monitoring.requests)} ListTimeSeries pages)"
    )
    assert inventory.gaps == []
    assert len(inventory.instances) == 3000
    assert {i.zone for i in inventory.instances} == set(ZONES)
    assert len(readings) == 3000 * minutes
    assert all(r.sm_mean == pytest.approx(100.0) for r in readings)
    assert fake.compute.calls["GET aggregated_list"] == 3 * 2  # 1,000 per project, 500 a page
    # 7 metric types, the 3 that can decide idleness read twice (mean, maximum)
    assert len(fake.monitoring.calls) == 7 and sum(fake.monitoring.calls.values()) == 3 * 10
