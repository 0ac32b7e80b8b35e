"""The Kubernetes API server, through the official `kubernetes` client: the workloads
costguard governs, read and patched.

The client does what it is made for (kubeconfig and in-cluster credentials, exec plugins,
TLS); answers are taken raw (`_preload_content=False`), read up to `MAX_BYTES` and parsed
under the project's JSON rules, so neither an API server's size nor a client release's
models decide what costguard holds. Lists are paged (`limit`, `continue`). Patches are
JSON merge patches; one that carries the `resourceVersion` costguard read is refused by the
API server (409) when someone changed the object meanwhile. Errors are `ProviderError`s
naming the cluster, the call and the API's own `Status` message, never a credential.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from costguard.errors import ProviderError
from costguard.k8s.settings import ApiSettings
from costguard.limited_json import JsonRefused, parse_json

log = logging.getLogger(__name__)

MAX_BYTES = 64 * 2**20  # one answer (a page of a list, an object)
PAGE = 500
MAX_PAGES = 200  # 100,000 objects of one kind: past that, a list is refused, not held
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class KubeObject:
    """One object as the API server answered it."""

    plural: str
    body: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any]:
        meta = self.body.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def name(self) -> str:
        return str(self.meta.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.meta.get("namespace", ""))

    @property
    def labels(self) -> dict[str, str]:
        return _strings(self.meta.get("labels"))

    @property
    def annotations(self) -> dict[str, str]:
        return _strings(self.meta.get("annotations"))

    @property
    def resource_version(self) -> str:
        return str(self.meta.get("resourceVersion", ""))

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.body.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def controller(self) -> tuple[str, str] | None:
        """(kind, name) of the owner reference marked controller, if any."""
        refs = self.meta.get("ownerReferences")
        for ref in refs if isinstance(refs, list) else []:
            if isinstance(ref, dict) and ref.get("controller"):
                return str(ref.get("kind", "")), str(ref.get("name", ""))
        return None

    @property
    def replicas(self) -> int | None:
        value = self.spec.get("replicas")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def suspended(self) -> bool:
        return self.spec.get("suspend") is True


class Api(Protocol):
    """What costguard asks of a cluster's API server (KubeApi; the demo's simulated one)."""

    calls: int

    def list(self, plural: str) -> list[KubeObject] | None: ...

    def get(self, plural: str, namespace: str, name: str) -> KubeObject | None: ...

    def patch(self, obj: KubeObject, body: dict[str, Any]) -> KubeObject: ...

    def delete_pod(self, pod: KubeObject) -> None: ...

    def close(self) -> None: ...


def _strings(value: Any) -> dict[str, str]:
    return ({str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {})


class _Expired(Exception):
    """A list's continue token expired (410) before its last page."""


class KubeApi:
    def __init__(self, cluster: str, settings: ApiSettings, timeout: float = 30.0) -> None:
        import kubernetes

        self.cluster = cluster
        self.timeout = timeout
        try:
            if settings.in_cluster:
                conf = kubernetes.client.Configuration()
                kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=conf)
                client = kubernetes.client.ApiClient(conf)
            else:
                client = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=str(settings.kubeconfig), context=settings.context)
        except (kubernetes.config.ConfigException, OSError, ValueError) as exc:
            raise ProviderError("k8s", cluster, f"cannot load the cluster's credentials: "
                                f"{exc}; check kubernetes.clusters[].api") from None
        self.client = client
        k = kubernetes.client
        self._core, self._apps = k.CoreV1Api(client), k.AppsV1Api(client)
        self._batch, self._hpa = k.BatchV1Api(client), k.AutoscalingV2Api(client)
        self._custom = k.CustomObjectsApi(client)
        self.calls = 0

    def close(self) -> None:
        self.client.close()  # type: ignore[no-untyped-call]

    # -- reads --
    def _pages(self, plural: str) -> list[KubeObject] | None:
        call = self._lists()[plural]
        out: list[KubeObject] = []
        cont: str | None = None
        for _ in range(MAX_PAGES):
            try:
                page = self._answer(f"list {plural}", functools.partial(call, cont))
            except ProviderError as exc:
                if plural == "notebooks" and "NotFound" in str(exc):
                    return None
                if cont and "HTTP 410 " in str(exc):
                    raise _Expired from None
                raise
            items = page.get("items")
            if isinstance(items, list):
                out.extend(KubeObject(plural, i) for i in items if isinstance(i, dict))
            meta = page.get("metadata")
            cont = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
            if not cont:
                return out
        raise ProviderError("k8s", self.cluster, f"more than {MAX_PAGES * PAGE:,} {plural}: "
                            "refused rather than held")

    def list(self, plural: str) -> list[KubeObject] | None:
        """Every object of a kind in every namespace; None where the kind is not served
        (Kubeflow's Notebook without its CRD).

        A list of many pages can outlive its continue token (the API server keeps a
        snapshot some five minutes): the server answers `410 Expired`. The pages read are
        then dropped and the list is read again from its start, once, as the API's own
        guidance says a client needing a consistent list must (the token the 410 offers
        goes on from a newer snapshot, mixing two)."""
        try:
            return self._pages(plural)
        except _Expired:
            log.warning("list %s in cluster %s: the continue token expired; reading the "
                        "list again from its start", plural, self.cluster)
        try:
            return self._pages(plural)
        except _Expired:
            raise ProviderError("k8s", self.cluster, f"list {plural}: the continue token "
                                "expired twice; the list is read again next cycle",
                                retryable=True) from None

    def get(self, plural: str, namespace: str, name: str) -> KubeObject | None:
        """The object now; None when it is gone."""
        try:
            return KubeObject(plural, self._answer(f"get {plural} {namespace}/{name}",
                                                   lambda: self._gets()[plural](namespace,
                                                                                name)))
        except ProviderError as exc:
            if "(NotFound)" in str(exc):
                return None
            raise

    # -- writes --
    def patch(self, obj: KubeObject, body: dict[str, Any]) -> KubeObject:
        """A merge patch of `obj`, refused (409) if it changed since it was read."""
        body = {**body, "metadata": {**body.get("metadata", {}),
                                     "resourceVersion": obj.resource_version}}
        call = self._patches()[obj.plural]
        return KubeObject(obj.plural, self._answer(
            f"patch {obj.plural} {obj.namespace}/{obj.name}",
            lambda: call(obj.namespace, obj.name, body)))

    def delete_pod(self, pod: KubeObject) -> None:
        """Delete `pod`, refused (409) if it changed since it was read."""
        from kubernetes.client import V1DeleteOptions, V1Preconditions

        options = V1DeleteOptions(preconditions=V1Preconditions(
            resource_version=pod.resource_version))
        self._answer(f"delete pod {pod.namespace}/{pod.name}", lambda: self._core
                     .delete_namespaced_pod(pod.name, pod.namespace, body=options,
                                            **self._opts()))

    # -- the calls --
    def _opts(self) -> dict[str, Any]:
        return {"_preload_content": False, "_request_timeout": self.timeout}

    def _lists(self) -> dict[str, Callable[[str | None], Any]]:
        o = self._opts

        def paged(fn: Callable[..., Any]) -> Callable[[str | None], Any]:
            return lambda cont: fn(limit=PAGE, _continue=cont or None, **o())

        return {
            "namespaces": paged(self._core.list_namespace),
            "nodes": paged(self._core.list_node),
            "deployments": paged(self._apps.list_deployment_for_all_namespaces),
            "statefulsets": paged(self._apps.list_stateful_set_for_all_namespaces),
            "jobs": paged(self._batch.list_job_for_all_namespaces),
            "cronjobs": paged(self._batch.list_cron_job_for_all_namespaces),
            "horizontalpodautoscalers": paged(
                self._hpa.list_horizontal_pod_autoscaler_for_all_namespaces),
            "notebooks": lambda cont: self._custom.list_cluster_custom_object(
                "kubeflow.org", "v1", "notebooks", limit=PAGE, _continue=cont or None, **o()),
        }

    def _gets(self) -> dict[str, Callable[[str, str], Any]]:
        o = self._opts
        return {
            "pods": lambda ns, n: self._core.read_namespaced_pod(n, ns, **o()),
            "deployments": lambda ns, n: self._apps.read_namespaced_deployment(n, ns, **o()),
            "statefulsets": lambda ns, n: self._apps.read_namespaced_stateful_set(n, ns, **o()),
            "jobs": lambda ns, n: self._batch.read_namespaced_job(n, ns, **o()),
            "cronjobs": lambda ns, n: self._batch.read_namespaced_cron_job(n, ns, **o()),
            "notebooks": lambda ns, n: self._custom.get_namespaced_custom_object(
                "kubeflow.org", "v1", ns, "notebooks", n, **o()),
        }

    def _patches(self) -> dict[str, Callable[[str, str, dict[str, Any]], Any]]:
        def opts() -> dict[str, Any]:
            return {**self._opts(), "_content_type": MERGE_PATCH}

        return {
            "deployments": lambda ns, n, b: self._apps.patch_namespaced_deployment(
                n, ns, b, **opts()),
            "statefulsets": lambda ns, n, b: self._apps.patch_namespaced_stateful_set(
                n, ns, b, **opts()),
            "jobs": lambda ns, n, b: self._batch.patch_namespaced_job(n, ns, b, **opts()),
            "cronjobs": lambda ns, n, b: self._batch.patch_namespaced_cron_job(
                n, ns, b, **opts()),
            "pods": lambda ns, n, b: self._core.patch_namespaced_pod(n, ns, b, **opts()),
            "notebooks": lambda ns, n, b: self._custom.patch_namespaced_custom_object(
                "kubeflow.org", "v1", ns, "notebooks", n, b, **opts()),
        }

    def _answer(self, what: str, call: Callable[[], Any]) -> dict[str, Any]:
        """The JSON object an API call answered, read with a bound; ProviderError else."""
        import kubernetes
        import urllib3

        self.calls += 1
        try:
            response = call()
        except kubernetes.client.ApiException as exc:
            raise self._error(what, exc.status, exc.body) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ProviderError("k8s", self.cluster, f"{what}: cannot reach the API server "
                                f"({type(exc).__name__}); check kubernetes.clusters[].api",
                                retryable=True) from None
        try:
            body = response.read(MAX_BYTES + 1, decode_content=True)
        finally:
            response.release_conn()
        status = int(getattr(response, "status", 200))
        if status >= 400:
            raise self._error(what, status, body)
        if len(body) > MAX_BYTES:
            raise ProviderError("k8s", self.cluster, f"{what}: answer over "
                                f"{MAX_BYTES // 2**20} MiB, refused")
        try:
            answer = parse_json(body, mend_text=True)  # one odd annotation: not the page
        except (JsonRefused, ValueError):
            answer = None
        if not isinstance(answer, dict):
            raise ProviderError("k8s", self.cluster, f"{what}: not a Kubernetes API answer")
        return answer

    def _error(self, what: str, status: int | None, body: Any) -> ProviderError:
        message, reason = "", ""
        try:
            raw = body if isinstance(body, bytes | str) else b""
            doc = parse_json(raw[:65536]) if raw else None
        except (JsonRefused, ValueError):
            doc = None
        if isinstance(doc, dict):
            message, reason = str(doc.get("message", ""))[:300], str(doc.get("reason", ""))
        return ProviderError("k8s", self.cluster,
                             f"{what}: HTTP {status} ({reason or 'error'}) {message}".rstrip(),
                             retryable=status in (429, 500, 502, 503, 504))
