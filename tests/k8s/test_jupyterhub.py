"""A JupyterHub single-user server (KubeSpawner's pod: `component: singleuser-server`, the
user and server in `hub.jupyter.org/*` annotations) is stopped through the hub's REST API,
as the hub's idle culler stops one: `DELETE /users/{name}/server` (or `/servers/{name}` for
a named server) with the hub token; never by deleting its pod. A local HTTP hub answers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from costguard.clock import ManualClock
from costguard.errors import ProviderError
from costguard.k8s.model import ClusterRead, Pod, PodKey, Requests, Workload
from costguard.k8s.provider import KubernetesProvider
from costguard.k8s.settings import KubernetesSettings
from costguard.model import ActionOutcome
from tests.fakes.kube_api import KubeApi, kubeconfig
from tests.fakes.loopback import serve

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
HUB_TOKEN = "hub-api-token-0123"


@pytest.fixture
def hub() -> Iterator[tuple[str, list[tuple[str, str, str | None]]]]:
    asked: list[tuple[str, str, str | None]] = []
    status = {"code": 202}

    async def delete(request: Request) -> Response:
        asked.append((request.method, request.url.path, request.headers.get("authorization")))
        return Response(status_code=status["code"])

    app = Starlette(routes=[
        Route("/hub/api/users/{name}/server", delete, methods=["DELETE"]),
        Route("/hub/api/users/{name}/servers/{server}", delete, methods=["DELETE"])])
    with serve(app) as url:
        yield url, asked


def _provider(tmp: Path, api_url: str, hub_url: str | None) -> tuple[KubernetesProvider,
                                                                      KubeApi]:
    (tmp / "kc").write_text(kubeconfig(api_url))
    (tmp / "hub-token").write_text(HUB_TOKEN + "\n")
    cluster: dict[str, object] = {"name": "c", "prometheus_url": "http://127.0.0.1:9",
                                  "api": {"kubeconfig": str(tmp / "kc")}}
    if hub_url is not None:
        cluster["jupyterhub"] = {"url": f"{hub_url}/hub/api",
                                 "token_file": str(tmp / "hub-token")}
    provider = KubernetesProvider(KubernetesSettings.model_validate({"clusters": [cluster]}),
                                  ManualClock(NOW))
    read = ClusterRead("c", NOW - timedelta(minutes=10), NOW, timedelta(minutes=1))
    for name in ("jupyter-ana", "jupyter-bo-2d-2dgpu"):
        pod = Pod(PodKey("jhub", name), node="n", workload=Workload("Pod", name))
        pod.requests = Requests(gpus=1, gpu_units=1, gpu_resource="nvidia.com/gpu")
        pod.steps = {NOW.timestamp() - 60: pod.requests}
        read.pods[pod.key] = pod
    provider._read = lambda cl, start, end: read  # type: ignore[method-assign]
    return provider, provider.clusters["c"].source  # type: ignore[return-value]


@pytest.fixture
def cluster() -> Iterator[tuple[KubeApi, str]]:
    api = KubeApi()
    api.add("namespaces", "", "jhub")
    api.add("pods", "jhub", "jupyter-ana", labels={
        "component": "singleuser-server", "hub.jupyter.org/username": "ana"},
        annotations={"hub.jupyter.org/username": "ana", "hub.jupyter.org/servername": ""})
    api.add("pods", "jhub", "jupyter-bo-2d-2dgpu", labels={
        "component": "singleuser-server", "hub.jupyter.org/username": "bo-2d",
        "hub.jupyter.org/servername": "gpu"},
        annotations={"hub.jupyter.org/username": "bo.d", "hub.jupyter.org/servername": "gpu"})
    with serve(api.app()) as url:
        yield api, url


def test_a_single_user_server_is_stopped_through_the_hub(
        tmp_path: Path, cluster: tuple[KubeApi, str],
        hub: tuple[str, list[tuple[str, str, str | None]]]) -> None:
    api, api_url = cluster
    hub_url, asked = hub
    provider, _ = _provider(tmp_path, api_url, hub_url)
    listed = {i.name: i for i in provider.list_instances().instances}
    assert set(listed) == {"jhub/JupyterServer/jupyter-ana",
                           "jhub/JupyterServer/jupyter-bo-2d-2dgpu"}
    dry = provider.stop(listed["jhub/JupyterServer/jupyter-ana"], dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and asked == []
    done = provider.stop(listed["jhub/JupyterServer/jupyter-ana"], dry_run=False)
    assert done.outcome is ActionOutcome.DONE and "ana's JupyterHub server" in done.detail
    provider.stop(listed["jhub/JupyterServer/jupyter-bo-2d-2dgpu"], dry_run=False)
    assert asked == [("DELETE", "/hub/api/users/ana/server", f"token {HUB_TOKEN}"),
                     ("DELETE", "/hub/api/users/bo.d/servers/gpu", f"token {HUB_TOKEN}")]
    assert not [r for r in api.requests if r[0] in ("DELETE", "PATCH")]  # never the pod
    started = provider.start(listed["jhub/JupyterServer/jupyter-ana"], dry_run=False)
    assert started.outcome is ActionOutcome.SKIPPED


def test_without_a_hub_a_server_is_reported_never_deleted(
        tmp_path: Path, cluster: tuple[KubeApi, str]) -> None:
    api, api_url = cluster
    provider, _ = _provider(tmp_path, api_url, None)
    inst = next(iter(provider.list_instances().instances))
    result = provider.stop(inst, dry_run=False)
    assert result.outcome is ActionOutcome.SKIPPED and "set jupyterhub" in result.detail
    assert not [r for r in api.requests if r[0] in ("DELETE", "PATCH")]


def test_a_hub_that_refuses_is_a_provider_error_without_its_token(
        tmp_path: Path, cluster: tuple[KubeApi, str]) -> None:
    async def refuse(request: Request) -> Response:
        return Response("403: Forbidden", status_code=403)

    app = Starlette(routes=[Route("/hub/api/users/{name}/server", refuse, methods=["DELETE"])])
    _, api_url = cluster
    with serve(app) as hub_url:
        provider, _ = _provider(tmp_path, api_url, hub_url)
        inst = next(i for i in provider.list_instances().instances
                    if i.name.endswith("jupyter-ana"))
        with pytest.raises(ProviderError, match="JupyterHub refused to stop ana's server: "
                           "HTTP 403") as err:
            provider.stop(inst, dry_run=False)
        assert HUB_TOKEN not in str(err.value)
