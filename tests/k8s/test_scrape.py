"""The exporters' own text format, scraped by a real Prometheus, read back as pods: with the
GPU Operator's `honorLabels: true`, and without it, where Prometheus keeps dcgm-exporter's
pod labels as `exported_pod`/`exported_namespace` and the plain ones name the exporter."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from costguard.k8s.model import PodKey
from costguard.k8s.prometheus import PrometheusClient
from costguard.k8s.read import read_cluster
from costguard.k8s.settings import ClusterSettings
from tests.fakes.loopback import serve
from tests.k8s.scenario import scenario
from tests.prom import PrometheusServer, start_prometheus

CONFIG = """\
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: dcgm-honoured
    honor_labels: true
    metrics_path: /dcgm
    static_configs: [{{targets: ["{target}"], labels: {{cluster: honoured}}}}]
  - job_name: ksm-honoured
    honor_labels: true
    metrics_path: /ksm
    static_configs: [{{targets: ["{target}"], labels: {{cluster: honoured}}}}]
  - job_name: dcgm-renamed
    metrics_path: /dcgm
    static_configs:
      - targets: ["{target}"]
        labels: {{cluster: renamed, namespace: gpu-operator,
                  pod: nvidia-dcgm-exporter-x7k2p, container: nvidia-dcgm-exporter}}
  - job_name: ksm-renamed
    honor_labels: true
    metrics_path: /ksm
    static_configs: [{{targets: ["{target}"], labels: {{cluster: renamed}}}}]
  - job_name: kubelet-cadvisor
    honor_labels: true
    metrics_path: /cadvisor
    static_configs: [{{targets: ["{target}"], labels: {{cluster: honoured}}}}]
"""


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer,
                                                                         datetime]]:
    from tests.k8s.conftest import _available

    _available()
    cluster = scenario()
    cluster.hostname_label = "hostname"  # dcgm-exporter since #655

    began = time.time()

    async def metrics(request: Request) -> PlainTextResponse:
        exporter = request.url.path.strip("/")
        minute = (time.time() - began) / 60  # the kubelet's CPU counters grow as time goes
        return PlainTextResponse(cluster.exposition(exporter, minute),
                                 media_type="text/plain; version=0.0.4")

    app = Starlette(routes=[Route("/dcgm", metrics), Route("/ksm", metrics),
                            Route("/cadvisor", metrics)])
    with serve(app) as base:
        folder: Path = tmp_path_factory.mktemp("scrape")
        server = start_prometheus(folder, config=CONFIG.format(target=base.split("//")[1]))
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not _scraped_both(server.url):
                time.sleep(0.2)
            # a whole second after the samples seen; then the first step's minute scraped
            # whole, and a scrape past it: a query at its end (start + 1 min) reads a fixed
            # set of samples (while that end was still ahead, each query saw the samples
            # scraped so far, and two queries a moment apart differed under load)
            start = datetime.fromtimestamp(int(time.time()) + 1, UTC)
            time.sleep(start.timestamp() - time.time() + 62.5)
            yield server, start
        finally:
            server.stop()


def _scraped_both(url: str) -> bool:
    """Both exporters scraped for both clusters (the scrape manager starts ~5 s late)."""
    for metric in ("DCGM_FI_DEV_FB_USED", "kube_pod_status_phase", "kube_node_info",
                   "container_cpu_usage_seconds_total"):
        answer = httpx.get(f"{url}/api/v1/query", params={
            "query": f"count by (cluster) ({metric})"}).json()
        wanted = 1 if metric.startswith("container_") else 2
        if len(answer["data"]["result"]) != wanted:
            return False
    return True


@pytest.mark.parametrize("cluster", ["honoured", "renamed"])
def test_scraped_exporters_read_as_pods(scraped: tuple[PrometheusServer, datetime],
                                        cluster: str) -> None:
    server, start = scraped
    cfg = ClusterSettings(name=cluster, prometheus_url=server.url,
                          selector=f'cluster="{cluster}"')
    with PrometheusClient(server.url, cluster=cluster) as client:
        r = read_cluster(client, cfg, start, start + timedelta(minutes=1),
                         timedelta(minutes=1))
    notebook = r.pods[PodKey("research", "notebook-alice-0")]
    assert len(notebook.devices) == 1 and notebook.readings
    assert notebook.readings[0].sm_max == 0 and notebook.readings[0].mem_used_bytes == (
        20480 * 2**20)
    train = r.pods[PodKey("research", "train-llm-x7k2p")]
    assert len(train.devices) == 4
    assert min(m.sm_max or 0 for m in train.readings if m.gpu_index < 2) > 40
    assert max(m.sm_max or 0 for m in train.readings if m.gpu_index >= 2) == 0
    if cluster == "honoured":  # the kubelet's cAdvisor scraped for this one only
        # its container's cores, counted once: not again through the pod's own cgroup
        # (container="") nor with the pause container's (a minute's rate over the few
        # seconds scraped is a share of the 18 cores: tests/k8s/test_cluster_read.py reads
        # whole hours of them)
        at = start + timedelta(minutes=1)
        answer = httpx.get(f"{server.url}/api/v1/query", params={"time": at.timestamp(), "query": (
            'sum(rate(container_cpu_usage_seconds_total{container="main",'
            'pod="train-llm-x7k2p"}[60s]))')}).json()
        main_only = float(answer["data"]["result"][0]["value"][1])
        assert main_only > 0
        assert list(train.cpu_used.values()) == [pytest.approx(main_only, rel=1e-9)]
    else:
        assert train.cpu_used == {}
    # the exporter's own pod holds no GPU: its GPUs free, never a pod of gpu-operator
    assert PodKey("gpu-operator", "nvidia-dcgm-exporter-x7k2p") not in r.pods
    assert len(r.free_devices["ip-10-0-1-10.ec2.internal"]) == 1
