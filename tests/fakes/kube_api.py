"""A local Kubernetes API server for the calls costguard makes, served over HTTP to the
official `kubernetes` client (tests/k8s).

What it follows (the Kubernetes API reference, "API Concepts"):
* lists: `GET /apis/apps/v1/deployments` (all namespaces) answer a `DeploymentList` with
  `metadata.resourceVersion` and, under `?limit=`, `metadata.continue` for the next page;
  items carry `metadata` (name, namespace, uid, resourceVersion, generation, labels,
  annotations, ownerReferences, creationTimestamp), `spec` and `status` (list items omit
  `kind`/`apiVersion`, as the API server's do);
* `PATCH` with `application/merge-patch+json` or `application/strategic-merge-patch+json`
  (JSON merge patch, RFC 7386: null removes a key; for the fields costguard patches the two
  agree); a `metadata.resourceVersion` in the patch is a precondition: another version is
  `409 Conflict`; every change bumps `resourceVersion` (and `generation` for spec);
* `DELETE` of a pod answers the pod; errors are `Status` objects (`reason` NotFound,
  Conflict, Forbidden...) with the HTTP code;
* a resource whose CRD is not installed (Kubeflow's notebooks) is `404` on its list;
* a continue token the server no longer holds (`expire_continue` of them, the next ones it
  is sent) is `410` with reason `Expired` and a token for the rest of a newer snapshot, as
  the API reference's `continue` parameter describes.

`requests` records every call (method, path, content type, body) for the tests' assertions.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

# the same RFC 7386 merge as the demo's simulated API server
from costguard.demo.sim_cluster import merge_patch

KINDS: dict[str, tuple[str, str]] = {  # plural -> (API prefix, Kind)
    "namespaces": ("/api/v1", "Namespace"),
    "nodes": ("/api/v1", "Node"),
    "pods": ("/api/v1", "Pod"),
    "deployments": ("/apis/apps/v1", "Deployment"),
    "statefulsets": ("/apis/apps/v1", "StatefulSet"),
    "daemonsets": ("/apis/apps/v1", "DaemonSet"),
    "jobs": ("/apis/batch/v1", "Job"),
    "cronjobs": ("/apis/batch/v1", "CronJob"),
    "horizontalpodautoscalers": ("/apis/autoscaling/v2", "HorizontalPodAutoscaler"),
    "notebooks": ("/apis/kubeflow.org/v1", "Notebook"),
}
CLUSTER_SCOPED = ("namespaces", "nodes")
GROUPS = {"deployments": "apps", "statefulsets": "apps", "daemonsets": "apps", "jobs": "batch",
          "cronjobs": "batch", "horizontalpodautoscalers": "autoscaling",
          "notebooks": "kubeflow.org"}


def status(code: int, reason: str, message: str) -> JSONResponse:
    return JSONResponse({"kind": "Status", "apiVersion": "v1", "metadata": {},
                         "status": "Failure", "message": message, "reason": reason,
                         "code": code}, status_code=code)


@dataclass
class KubeApi:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    installed: set[str] = field(default_factory=lambda: set(KINDS))
    requests: list[tuple[str, str, str, Any]] = field(default_factory=list)
    forbidden: set[tuple[str, str]] = field(default_factory=set)  # (method, plural)
    expire_continue: int = 0  # the next continue tokens sent that are answered 410
    _rv: itertools.count = field(default_factory=lambda: itertools.count(1000))

    def add(self, plural: str, namespace: str, name: str, *, labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, spec: dict[str, Any] | None = None,
            status: dict[str, Any] | None = None,
            owner: tuple[str, str, str] | None = None) -> dict[str, Any]:
        digest = hashlib.sha1(f"{plural}/{namespace}/{name}".encode()).hexdigest()
        meta: dict[str, Any] = {
            "name": name, "uid": f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-8{digest[17:20]}-"
                                 f"{digest[20:32]}",
            "resourceVersion": str(next(self._rv)), "generation": 1,
            "creationTimestamp": "2026-11-30T08:00:00Z", "labels": labels or {},
            "annotations": annotations or {}}
        if plural not in CLUSTER_SCOPED:
            meta["namespace"] = namespace
        if owner is not None:
            api_version, kind, owner_name = owner
            meta["ownerReferences"] = [{"apiVersion": api_version, "kind": kind,
                                        "name": owner_name, "uid": "owner-uid",
                                        "controller": True, "blockOwnerDeletion": True}]
        obj = {"metadata": meta, "spec": spec or {}, "status": status or {}}
        self.objects[(plural, namespace, name)] = obj
        return obj

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[(plural, namespace, name)]

    def app(self) -> Starlette:
        routes = []
        for plural, (prefix, _) in KINDS.items():
            routes.append(Route(f"{prefix}/{plural}", self._list(plural), methods=["GET"]))
            if plural in CLUSTER_SCOPED:
                routes.append(Route(f"{prefix}/{plural}/{{name}}", self._one(plural),
                                    methods=["GET", "PATCH"]))
                continue
            routes.append(Route(f"{prefix}/namespaces/{{namespace}}/{plural}/{{name}}",
                                self._one(plural), methods=["GET", "PATCH", "DELETE"]))
        return Starlette(routes=routes)

    def _list(self, plural: str) -> Any:
        prefix, kind = KINDS[plural]

        async def handler(request: Request) -> JSONResponse:
            self.requests.append(("GET", request.url.path, "", dict(request.query_params)))
            if plural not in self.installed:
                return status(404, "NotFound", "the server could not find the requested "
                                               "resource")
            if ("list", plural) in self.forbidden:
                return status(403, "Forbidden", f'{plural} is forbidden: User "costguard" '
                              f'cannot list resource "{plural}" at the cluster scope')
            items = [copy.deepcopy(o) for (p, _, _), o in sorted(self.objects.items())
                     if p == plural]
            if request.query_params.get("continue") and self.expire_continue > 0:
                self.expire_continue -= 1
                expired = status(410, "Expired", "The provided continue parameter is too old "
                                 "to display a consistent list result. You can start a new "
                                 "list without the continue parameter, or use the continue "
                                 "token in this response to retrieve the remainder of the "
                                 "results.")
                body = json.loads(bytes(expired.body))
                body["metadata"] = {"continue": request.query_params["continue"]}
                return JSONResponse(body, status_code=410)
            start = int(request.query_params.get("continue") or 0)
            limit = int(request.query_params.get("limit") or 0) or len(items) or 1
            page = items[start:start + limit]
            meta: dict[str, Any] = {"resourceVersion": str(next(self._rv))}
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
            return JSONResponse({"kind": f"{kind}List", "apiVersion": prefix.split("/", 2)[-1]
                                 if prefix != "/api/v1" else "v1", "metadata": meta,
                                 "items": page})
        return handler

    def _one(self, plural: str) -> Any:
        async def handler(request: Request) -> JSONResponse:
            ns = request.path_params.get("namespace", "")
            name = request.path_params["name"]
            body = await request.body()
            ctype = request.headers.get("content-type", "")
            self.requests.append((request.method, request.url.path, ctype,
                                  json.loads(body) if body else None))
            group = GROUPS.get(plural, "")
            what = f"{plural}.{group}" if group else plural
            obj = self.objects.get((plural, ns, name))
            if obj is None:
                return status(404, "NotFound", f'{what} "{name}" not found')
            if (request.method.lower(), plural) in self.forbidden:
                return status(403, "Forbidden", f'{what} "{name}" is forbidden: User '
                              f'"costguard" cannot {request.method.lower()} resource')
            if request.method == "GET":
                return JSONResponse(obj)
            if request.method == "DELETE":
                del self.objects[(plural, ns, name)]
                return JSONResponse(obj)
            if ctype.split(";")[0] not in ("application/merge-patch+json",
                                           "application/strategic-merge-patch+json"):
                return status(415, "UnsupportedMediaType", f"the body of the request was in "
                              f"an unknown format - accepted media types include: "
                              f"application/merge-patch+json (got {ctype})")
            patch = json.loads(body)
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
                return status(409, "Conflict", f'Operation cannot be fulfilled on {what} '
                              f'"{name}": the object has been modified; please apply your '
                              "changes to the latest version and try again")
            new = merge_patch(obj, patch)
            new["metadata"]["resourceVersion"] = str(next(self._rv))
            if "spec" in patch:
                new["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
            self.objects[(plural, ns, name)] = new
            return JSONResponse(new)
        return handler


def kubeconfig(url: str, token: str = "test-token") -> str:
    """A kubeconfig for `url`, as `kubectl config view --raw` writes one."""
    return f"""apiVersion: v1
kind: Config
clusters:
- cluster:
    server: {url}
  name: test
contexts:
- context:
    cluster: test
    user: costguard
  name: test
current-context: test
preferences: {{}}
users:
- name: costguard
  user:
    token: {token}
"""
