"""Cloud TPU API v2 in the Compute fake (handlers for FakeCompute), as its REST reference
(cloud.google.com/tpu/docs/reference/rest/v2) shapes it, for the real `google-cloud-tpu`
client over REST.

Implemented: projects.locations.nodes list (`locations/-` for every zone, or one zone;
pageSize/pageToken), get, stop (single-host nodes only: a multi-host node answers 400, as
the reference says "only available with single TPU nodes"), start, patch (`updateMask`
labels), and projects.locations.operations get (an operation is done after
`operation_delay_s`, its `response` the node as google.cloud.tpu.v2.Node). Not implemented:
create, delete, queued resources, every other method (501).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from costguard.demo.gcp_fake.http import error

_NODE_TYPE = "type.googleapis.com/google.cloud.tpu.v2.Node"
_META_TYPE = "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"
_ID_START = 7_000_000_000_000_000_000
_CONFIG_TYPES = {"v2-": "V2", "v3-": "V3", "v4-": "V4", "v5litepod-": "V5LITE_POD",
                 "v5p-": "V5P", "v6e-": "V6E", "tpu7x-": "TPU7X"}


def _stamp(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class FakeTpuNode:
    project: str
    zone: str
    name: str
    id: int
    accelerator_type: str
    hosts: int = 1
    state: str = "READY"
    labels: dict[str, str] = field(default_factory=dict)
    topology: str = ""
    spot: bool = False
    reserved: bool = False
    queued_resource: str = ""
    service_account: str | None = None
    created: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))

    @property
    def path(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}/nodes/{self.name}"

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.path,
            "acceleratorType": self.accelerator_type,
            "state": self.state,
            "runtimeVersion": "v2-alpha-tpuv5-lite",
            "networkConfig": {"network": f"projects/{self.project}/global/networks/default",
                              "subnetwork": f"projects/{self.project}/regions/"
                                            f"{self.zone.rsplit('-', 1)[0]}/subnetworks/default",
                              "enableExternalIps": True},
            "cidrBlock": "10.128.0.0/20",
            "createTime": _stamp(self.created),
            "schedulingConfig": {"preemptible": False, "reserved": self.reserved,
                                 "spot": self.spot},
            "networkEndpoints": [
                {"ipAddress": f"10.128.{self.id % 200}.{i + 2}", "port": 8470,
                 "accessConfig": {"externalIp": f"34.1.{self.id % 200}.{i + 2}"}}
                for i in range(self.hosts)],
            "health": "HEALTHY",
            "labels": dict(self.labels),
            "id": str(self.id),
            "apiVersion": "V2",
            "shieldedInstanceConfig": {"enableSecureBoot": False},
        }
        prefix = self.accelerator_type.rsplit("-", 1)[0] + "-"
        if prefix in _CONFIG_TYPES:
            body["acceleratorConfig"] = {"type": _CONFIG_TYPES[prefix],
                                         **({"topology": self.topology} if self.topology else {})}
        if self.service_account:
            body["serviceAccount"] = {"email": self.service_account,
                                      "scope": ["https://www.googleapis.com/auth/cloud-platform"]}
        if self.queued_resource:
            body["queuedResource"] = (f"projects/{self.project}/locations/{self.zone}/"
                                      f"queuedResources/{self.queued_resource}")
        return body


@dataclass
class _TpuOperation:
    name: str
    verb: str
    node: FakeTpuNode
    done_at: float
    apply: Any
    created: datetime
    done: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "metadata": {"@type": _META_TYPE, "createTime": _stamp(self.created),
                         "target": self.node.path, "verb": self.verb,
                         "cancelRequested": False, "apiVersion": "v2"},
            "done": self.done,
        }
        if self.done:
            out["response"] = {"@type": _NODE_TYPE, **self.node.to_json()}
        return out


def disabled_api(project: str, title: str, service: str) -> dict[str, Any]:
    """The 403 an API switched off in `project` answers (reason SERVICE_DISABLED)."""
    payload = error(403, f"{title} has not been used in project {project} before or it is "
                         "disabled.", reason="accessNotConfigured")
    payload["error"]["details"] = [{
        "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED",
        "domain": "googleapis.com", "metadata": {"service": service}}]
    return payload


def location_page(items: Iterable[Any], project: str, zone: str, query: dict[str, str],
                  key: str) -> dict[str, Any]:
    """A `projects/P/locations/ZONE` list's page (`-`: every zone) of `items` (each with
    project, zone, name and to_json), by zone and name, `pageSize`/`pageToken` as the v2
    APIs take them."""
    size = max(1, min(int(query.get("pageSize") or 1000), 1000))
    start = int(query.get("pageToken") or 0)
    found = sorted((i for i in items if i.project == project and zone in ("-", i.zone)),
                   key=lambda i: (i.zone, i.name))
    page = [i.to_json() for i in found[start:start + size]]
    out: dict[str, Any] = {key: page} if page else {}
    if start + size < len(found):
        out["nextPageToken"] = str(start + size)
    return out


_V2 = r"/v2/projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)"
TPU_ROUTES: tuple[tuple[str, str, str], ...] = (
    (_V2 + r"/nodes$", "GET", "tpu_list"),
    (_V2 + r"/nodes/(?P<name>[^/:]+)$", "GET", "tpu_get"),
    (_V2 + r"/nodes/(?P<name>[^/:]+):stop$", "POST", "tpu_stop"),
    (_V2 + r"/nodes/(?P<name>[^/:]+):start$", "POST", "tpu_start"),
    (_V2 + r"/nodes/(?P<name>[^/:]+)$", "PATCH", "tpu_patch"),
    (_V2 + r"/operations/(?P<op>[^/]+)$", "GET", "tpu_operation_get"),
)


class TpuOps:
    """The TPU half of FakeCompute (its lock, clock and operation delay)."""

    _lock: threading.RLock
    operation_delay_s: float

    def _init_tpus(self) -> None:
        self._tpu_nodes: dict[tuple[str, str, str], FakeTpuNode] = {}
        self._tpu_ops: dict[str, Any] = {}  # also the Workbench half's (same routes)
        self._tpu_ids = itertools.count(_ID_START)
        self._tpu_op_ids = itertools.count(1)
        # projects whose Cloud TPU API is disabled: listing answers 403 SERVICE_DISABLED
        self.tpu_disabled: set[str] = set()

    def add_tpu_node(self, project: str, zone: str, name: str, accelerator_type: str, *,
                     hosts: int = 1, state: str = "READY", labels: dict[str, str] | None = None,
                     topology: str = "", spot: bool = False, reserved: bool = False,
                     queued_resource: str = "", service_account: str | None = None,
                     created: datetime | None = None) -> FakeTpuNode:
        with self._lock:
            node = FakeTpuNode(project, zone, name, next(self._tpu_ids), accelerator_type,
                               hosts=hosts, state=state, labels=dict(labels or {}),
                               topology=topology, spot=spot, reserved=reserved,
                               queued_resource=queued_resource,
                               service_account=service_account)
            if created is not None:
                node.created = created
            self._tpu_nodes[(project, zone, name)] = node
            return node

    def tpu_node(self, project: str, zone: str, name: str) -> FakeTpuNode:
        with self._lock:
            return self._tpu_nodes[(project, zone, name)]

    def _tpu_complete_due(self) -> None:
        now = time.monotonic()
        for op in self._tpu_ops.values():
            if not op.done and op.done_at <= now:
                op.apply(op.node)
                op.done = True

    def _tpu_list(self, project: str, zone: str, query: dict[str, str],
                  body: Any) -> tuple[int, Any]:
        if project in self.tpu_disabled:
            return 403, disabled_api(project, "Cloud TPU API", "tpu.googleapis.com")
        with self._lock:
            self._tpu_complete_due()
            return 200, location_page(self._tpu_nodes.values(), project, zone, query, "nodes")

    def _tpu_find(self, project: str, zone: str, name: str) -> FakeTpuNode | None:
        with self._lock:
            self._tpu_complete_due()
            return self._tpu_nodes.get((project, zone, name))

    def _tpu_get(self, project: str, zone: str, name: str, query: dict[str, str],
                 body: Any) -> tuple[int, Any]:
        node = self._tpu_find(project, zone, name)
        if node is None:
            return 404, error(404, f"Resource '{name}' was not found")
        return 200, node.to_json()

    def _tpu_operation(self, node: FakeTpuNode, verb: str, apply: Any,
                       interim: str | None) -> tuple[int, Any]:
        with self._lock:
            if interim:
                node.state = interim
            return self._tpu_new_operation(node, verb, apply, _TpuOperation)

    def _tpu_new_operation(self, node: Any, verb: str, apply: Any,
                           make: Any) -> tuple[int, Any]:
        """A `projects.locations.operations` operation on `node` (a TPU node, or a
        Workbench instance: `make` builds the operation), done after the delay."""
        with self._lock:
            name = (f"projects/{node.project}/locations/{node.zone}/operations/"
                    f"operation-{next(self._tpu_op_ids)}-{verb}")
            op = make(name, verb, node, time.monotonic() + self.operation_delay_s, apply,
                      datetime.now(UTC))
            self._tpu_ops[name] = op
            self._tpu_complete_due()
            return 200, op.to_json()

    def _tpu_stop(self, project: str, zone: str, name: str, query: dict[str, str],
                  body: Any) -> tuple[int, Any]:
        return self._tpu_power(project, zone, name, "stop", "STOPPING", "STOPPED")

    def _tpu_start(self, project: str, zone: str, name: str, query: dict[str, str],
                   body: Any) -> tuple[int, Any]:
        return self._tpu_power(project, zone, name, "start", "STARTING", "READY")

    def _tpu_power(self, project: str, zone: str, name: str, verb: str, interim: str,
                   done: str) -> tuple[int, Any]:
        node = self._tpu_find(project, zone, name)
        if node is None:
            return 404, error(404, f"Resource '{name}' was not found")
        if verb == "stop" and node.hosts > 1:
            return 400, error(400, "Stop is only available with single TPU nodes.",
                              reason="badRequest")

        def apply(n: FakeTpuNode) -> None:
            n.state = done
        return self._tpu_operation(node, verb, apply, interim)

    def _tpu_patch(self, project: str, zone: str, name: str, query: dict[str, str],
                   body: Any) -> tuple[int, Any]:
        node = self._tpu_find(project, zone, name)
        if node is None:
            return 404, error(404, f"Resource '{name}' was not found")
        mask = [p.strip() for p in (query.get("updateMask") or "").split(",") if p.strip()]
        if mask != ["labels"]:
            return 400, error(400, f"the fake updates labels only, not {mask}")
        labels = dict(body.get("labels") or {})

        def apply(n: FakeTpuNode) -> None:
            n.labels = labels
        return self._tpu_operation(node, "update", apply, None)

    def _tpu_operation_get(self, project: str, zone: str, op: str, query: dict[str, str],
                           body: Any) -> tuple[int, Any]:
        with self._lock:
            self._tpu_complete_due()
            found = self._tpu_ops.get(f"projects/{project}/locations/{zone}/operations/{op}")
            if found is None:
                return 404, error(404, f"operation {op} not found")
            return 200, found.to_json()
