"""The seeded c7n-peer fleet (1,000 instances, 4 regions) on a moto server on 127.0.0.1."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from statistics import mean

import boto3
import pytest
from moto.server import ThreadedMotoServer

from costguard.clock import ManualClock
from costguard.model import InstanceState, Lifecycle
from costguard.providers.aws import AwsProvider, AwsSettings
from tests.fakes.aws_fleet import (
    DEFAULT_REGIONS,
    Layout,
    build_fleet,
    plan_fleet,
    server_clients,
)

N = 1_000


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def _reset(url: str) -> None:
    # The server shares moto's in-process state: every fleet starts from nothing.
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"))


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["instance-id", "mixed"])
def test_fleet_inventory_and_gpu_metrics_match_the_peer_expectations(
    moto_server: str, layout: Layout
) -> None:
    _reset(moto_server)
    # never on a whole minute: a point put at the anchor itself must fall inside the read
    # window [anchor - 14 min, anchor), and at :00 it sat on the excluded end (1 run in 60)
    anchor = datetime.now(UTC).replace(second=30, microsecond=0)
    specs = plan_fleet(N, DEFAULT_REGIONS)
    doc = build_fleet(server_clients(moto_server), specs, DEFAULT_REGIONS, anchor, layout=layout)
    provider = AwsProvider(
        AwsSettings(regions=DEFAULT_REGIONS, endpoint_url=moto_server, max_workers=4),
        clock=ManualClock(anchor),
        session=boto3.Session(region_name="us-east-1"),
    )

    started = time.perf_counter()
    inventory = provider.list_instances()
    inventory_s = time.perf_counter() - started

    assert inventory.gaps == []
    by_id = {i.instance_id: i for i in inventory.instances}
    assert len(by_id) == N
    for region in DEFAULT_REGIONS:
        expected = doc["expected"][region]
        assert {i for i, inst in by_id.items() if inst.region == region} == set(expected["all"])
        stopped = {
            i
            for i, inst in by_id.items()
            if inst.region == region and inst.state is InstanceState.STOPPED
        }
        assert stopped == set(expected["prestopped"])
    for s in specs:
        inst = by_id[s["id"]]
        assert (inst.lifecycle is Lifecycle.SPOT) == s["spot"]
        assert inst.has_gpu == s["gpu"]
        assert inst.tags == dict(s["tags"])

    # The last 15 minutes: idle and went-idle GPUs read < 5 %, busy and recently-busy do not.
    gpu_running = [i for i in inventory.instances if i.has_gpu and i.state is InstanceState.RUNNING]
    started = time.perf_counter()
    rows = provider.gpu_metrics(gpu_running, anchor - timedelta(minutes=14), anchor)
    metrics_s = time.perf_counter() - started

    assert provider.metric_gaps == []
    per_instance: dict[str, list[float]] = {}
    for r in rows:
        assert r.util_mean is not None
        if r.gpu_index == 0:  # an InstanceId-only series stands for every GPU (p4d: 8)
            per_instance.setdefault(r.instance_id, []).append(r.util_mean)
    with_agent = {s["id"] for s in specs if s["gpu_util"] is not None}
    assert set(per_instance) == with_agent
    assert all(len(v) == 3 for v in per_instance.values())  # points at 0, 5 and 10 minutes ago
    idle_now = {i for i, v in per_instance.items() if mean(v) < 5.0}
    protected = {s["id"] for s in specs if s["protect"] == "true"}
    expected_stop = {i for r in DEFAULT_REGIONS for i in doc["expected"][r]["idle_gpu_stop"]}
    assert idle_now - protected == expected_stop
    # One GetMetricData call per region: each region has fewer than 500 GPU series.
    assert provider.get_metric_data_calls == len(DEFAULT_REGIONS)
    print(
        f"\nfleet N={N} layout={layout}: inventory {inventory_s:.2f}s, gpu metrics {metrics_s:.2f}s"
    )
