"""Properties of acting on workloads, over generated clusters (the official client against
the local API server; the cluster's pods and their idle GPUs given as Prometheus would read
them):

* no stop ever patches or deletes a DaemonSet, anything in a protected namespace, a
  workload or namespace carrying costguard.io/protect, or anything of a controller
  costguard does not know;
* a scaled-to-zero workload's replica count is never lost, whatever stops and starts run
  and however often the daemon restarts in between (a new provider each time).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costguard.clock import ManualClock
from costguard.k8s.model import ClusterRead, Pod, PodKey, Requests, Workload
from costguard.k8s.provider import KubernetesProvider
from costguard.k8s.settings import KubernetesSettings
from costguard.k8s.workloads import REPLICAS_BEFORE
from costguard.model import InstanceState
from tests.fakes.kube_api import KubeApi, kubeconfig
from tests.fakes.loopback import serve

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
KINDS = ["Deployment", "StatefulSet", "DaemonSet", "Job", "Pod", "ReplicaSet", "RayCluster",
         "Notebook"]
NAMESPACES = ["research", "serving", "kube-system", "gpu-operator", "guarded"]
PLURAL = {"Deployment": "deployments", "StatefulSet": "statefulsets",
          "DaemonSet": "daemonsets", "Job": "jobs", "Pod": "pods"}

workload = st.tuples(st.sampled_from(KINDS), st.sampled_from(NAMESPACES),
                     st.integers(1, 4),  # replicas
                     st.booleans(),  # carries costguard.io/protect
                     st.sampled_from(["label", "annotation"]))


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[KubeApi, str]]:
    api = KubeApi()
    with serve(api.app()) as url:
        yield api, url


def _cluster(api: KubeApi, spec: list[tuple[str, str, int, bool, str]]) -> ClusterRead:
    api.objects.clear()
    api.requests.clear()
    for ns in NAMESPACES:
        guarded = {"costguard.io/protect": "true"} if ns == "guarded" else {}
        api.add("namespaces", "", ns, labels=guarded)
    read = ClusterRead("c", NOW - timedelta(minutes=10), NOW, timedelta(minutes=1))
    for n, (kind, ns, replicas, protect, where) in enumerate(spec):
        name = f"w{n}"
        mark = {"costguard.io/protect": "yes"} if protect else {}
        labels, annotations = (mark, {}) if where == "label" else ({}, mark)
        owner_kind, owner_name = kind, name
        if kind == "Notebook":
            api.add("notebooks", ns, name, labels=labels, annotations=annotations)
            api.add("statefulsets", ns, name, spec={"replicas": 1},
                    owner=("kubeflow.org/v1", "Notebook", name))
            owner_kind = "StatefulSet"
        elif kind in PLURAL:
            api.add(PLURAL[kind], ns, name, labels=labels, annotations=annotations,
                    spec={"replicas": replicas} if kind in ("Deployment", "StatefulSet")
                    else {})
        for r in range(replicas if kind in ("Deployment", "StatefulSet", "DaemonSet") else 1):
            key = PodKey(ns, name if kind == "Pod" else f"{name}-{r}")
            pod = Pod(key, node="node-a", workload=Workload(owner_kind, owner_name))
            pod.requests = Requests(gpus=1, gpu_units=1, gpu_resource="nvidia.com/gpu")
            pod.steps = {NOW.timestamp() - 60: pod.requests}
            read.pods[key] = pod
    return read


def _provider(url: str, tmp: Path, read: ClusterRead) -> KubernetesProvider:
    (tmp / "kubeconfig").write_text(kubeconfig(url))
    cfg = KubernetesSettings.model_validate({"clusters": [{
        "name": "c", "prometheus_url": "http://127.0.0.1:9",
        "api": {"kubeconfig": str(tmp / "kubeconfig")}, "delete_bare_pods": True}]})
    provider = KubernetesProvider(cfg, ManualClock(NOW))
    provider._read = lambda cl, start, end: read  # type: ignore[method-assign]
    return provider


def _touched(api: KubeApi) -> list[str]:
    return [path for method, path, _, _ in api.requests if method in ("PATCH", "DELETE")]


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(spec=st.lists(workload, min_size=1, max_size=8))
def test_no_stop_reaches_what_must_never_be_touched(
        server: tuple[KubeApi, str], tmp_path: Path,
        spec: list[tuple[str, str, int, bool, str]]) -> None:
    api, url = server
    provider = _provider(url, tmp_path, _cluster(api, spec))
    for inst in provider.list_instances().instances:
        provider.stop(inst, dry_run=False)
    for path in _touched(api):
        ns, plural, name = path.split("/namespaces/")[1].split("/")
        n = int(name[1:])
        kind, _, _, protect, _ = spec[n]
        assert plural != "daemonsets" and kind not in ("DaemonSet", "ReplicaSet", "RayCluster")
        assert ns not in ("kube-system", "gpu-operator", "guarded")
        assert not protect
    # and everything that may be stopped was
    stoppable = [n for n, (kind, ns, _, protect, _) in enumerate(spec)
                 if kind in ("Deployment", "StatefulSet", "Job", "Pod", "Notebook")
                 and ns in ("research", "serving") and not protect]
    touched = {int(p.rsplit("/", 1)[1][1:]) for p in _touched(api)}
    assert touched == set(stoppable)


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(replicas=st.integers(1, 9), steps=st.lists(st.sampled_from(["stop", "start",
                                                                   "restart"]),
                                                   min_size=1, max_size=8))
def test_a_kept_replica_count_survives_any_order_of_stops_starts_and_restarts(
        server: tuple[KubeApi, str], tmp_path: Path, replicas: int, steps: list[str]) -> None:
    api, url = server
    read = _cluster(api, [("Deployment", "serving", replicas, False, "label")])
    provider = _provider(url, tmp_path, read)
    for step in steps:
        if step == "restart":  # the daemon again, knowing nothing but what the cluster says
            provider = _provider(url, tmp_path, read)
            continue
        (inst,) = provider.list_instances().instances
        if step == "stop":
            provider.stop(inst, dry_run=False)
        elif inst.state is InstanceState.STOPPED or REPLICAS_BEFORE in api.get(
                "deployments", "serving", "w0")["metadata"]["annotations"]:
            provider.start(inst, dry_run=False)
        obj = api.get("deployments", "serving", "w0")
        now_replicas = obj["spec"]["replicas"]
        kept = obj["metadata"]["annotations"].get(REPLICAS_BEFORE)
        assert now_replicas == replicas or (now_replicas == 0 and kept == str(replicas))


def test_a_notebook_whose_crd_cannot_be_read_is_left_to_its_controller(
        server: tuple[KubeApi, str], tmp_path: Path) -> None:
    api, url = server
    read = _cluster(api, [("Notebook", "research", 1, False, "label")])
    api.installed.discard("notebooks")
    try:
        provider = _provider(url, tmp_path, read)
        (inst,) = provider.list_instances().instances
        assert inst.owner is not None and "Notebook" in inst.owner.name
        result = provider.stop(inst, dry_run=False)
        assert result.outcome == "skipped" and not _touched(api)
    finally:
        api.installed.add("notebooks")
