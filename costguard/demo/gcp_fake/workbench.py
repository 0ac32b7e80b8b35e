"""Vertex AI Workbench instances (Notebooks API v2) in the Compute fake (handlers for
FakeCompute), as the REST reference shapes them
(cloud.google.com/vertex-ai/docs/workbench/reference/rest/v2/projects.locations.instances),
for the real `google-cloud-notebooks` client over REST.

A Workbench instance runs on a Compute Engine VM of its name in its zone, labelled
`goog-caip-notebook` as Google labels it (a test can leave the label off): `add_workbench`
makes both, and a stop or start moves both. Implemented: projects.locations.instances list
(`locations/-` or one zone; pageSize/pageToken), get, stop, start, patch (`updateMask`
labels); operations are the fake's `projects.locations.operations` (shared with the Cloud
TPU half), done after `operation_delay_s`, their `response` the instance. A project in
`workbench_disabled` answers 403 SERVICE_DISABLED, one in `workbench_denied` 403
PERMISSION_DENIED. Not implemented: create, delete, upgrade, every other method (501).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from costguard.demo.gcp_fake.http import error
from costguard.demo.gcp_fake.records import FakeVm
from costguard.demo.gcp_fake.tpu import disabled_api, location_page

_INSTANCE_TYPE = "type.googleapis.com/google.cloud.notebooks.v2.Instance"
_META_TYPE = "type.googleapis.com/google.cloud.notebooks.v2.OperationMetadata"
NOTEBOOK_LABEL = "goog-caip-notebook"


def _stamp(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class FakeWorkbench:
    project: str
    zone: str
    name: str
    vm: FakeVm
    accelerators: list[tuple[str, int]] = field(default_factory=list)  # (API enum, count)
    state: str = "ACTIVE"
    labels: dict[str, str] = field(default_factory=dict)
    creator: str = "ana@example.com"
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    created: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))

    @property
    def path(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}/instances/{self.name}"

    def to_json(self) -> dict[str, Any]:
        region = self.zone.rsplit("-", 1)[0]
        setup: dict[str, Any] = {
            "machineType": self.vm.machine_type,
            "serviceAccounts": [{"email": self.vm.service_account
                                 or f"{self.project}-compute@developer.gserviceaccount.com",
                                 "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}],
            "vmImage": {"project": "cloud-notebooks-managed",
                        "name": "workbench-instances-v20251014"},
            "bootDisk": {"diskSizeGb": "150", "diskType": "PD_BALANCED",
                         "diskEncryption": "GMEK"},
            "dataDisks": [{"diskSizeGb": "100", "diskType": "PD_BALANCED",
                           "diskEncryption": "GMEK"}],
            "networkInterfaces": [{
                "network": f"https://www.googleapis.com/compute/v1/projects/{self.project}/"
                           "global/networks/default",
                "subnet": f"https://www.googleapis.com/compute/v1/projects/{self.project}/"
                          f"regions/{region}/subnetworks/default",
                "nicType": "GVNIC"}],
            "metadata": {"idle-timeout-seconds": "10800", "notebooks-api": "PROD",
                         "proxy-mode": "service_account"},
            "tags": ["deeplearning-vm", "notebook-instance"],
        }
        if self.accelerators:
            setup["acceleratorConfigs"] = [{"type": kind, "coreCount": str(count)}
                                           for kind, count in self.accelerators]
        return {
            "name": self.path,
            "gceSetup": setup,
            "proxyUri": f"{self.id[:16]}-dot-{region}.notebooks.googleusercontent.com",
            "instanceOwners": [self.creator],
            "creator": self.creator,
            "state": self.state,
            "id": self.id,
            "healthState": "HEALTHY" if self.state == "ACTIVE" else "HEALTH_STATE_UNSPECIFIED",
            "createTime": _stamp(self.created),
            "updateTime": _stamp(self.created),
            "disableProxyAccess": False,
            "labels": dict(self.labels),
        }


@dataclass
class _WorkbenchOperation:
    """An operation of the Notebooks API, kept with the Cloud TPU half's (same routes)."""

    name: str
    verb: str
    node: FakeWorkbench
    done_at: float
    apply: Any
    created: datetime
    done: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "metadata": {"@type": _META_TYPE, "createTime": _stamp(self.created),
                         "target": self.node.path, "verb": self.verb,
                         "requestedCancellation": False, "apiVersion": "v2",
                         "endpoint": f"{self.verb.title()}Instance"},
            "done": self.done,
        }
        if self.done:
            out["response"] = {"@type": _INSTANCE_TYPE, **self.node.to_json()}
        return out


_V2 = r"/v2/projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)"
WORKBENCH_ROUTES: tuple[tuple[str, str, str], ...] = (
    (_V2 + r"/instances$", "GET", "workbench_list"),
    (_V2 + r"/instances/(?P<name>[^/:]+)$", "GET", "workbench_get"),
    (_V2 + r"/instances/(?P<name>[^/:]+):stop$", "POST", "workbench_stop"),
    (_V2 + r"/instances/(?P<name>[^/:]+):start$", "POST", "workbench_start"),
    (_V2 + r"/instances/(?P<name>[^/:]+)$", "PATCH", "workbench_patch"),
)


class WorkbenchOps:
    """The Workbench half of FakeCompute (its lock, VMs, operations and delay)."""

    _lock: threading.RLock
    operation_delay_s: float
    add_instance: Callable[..., FakeVm]  # FakeCompute's
    _tpu_complete_due: Callable[[], None]  # TpuOps'
    _tpu_new_operation: Callable[[Any, str, Any, Any], tuple[int, Any]]  # TpuOps'

    def _init_workbench(self) -> None:
        self._benches: dict[tuple[str, str, str], FakeWorkbench] = {}
        self.workbench_disabled: set[str] = set()
        self.workbench_denied: set[str] = set()

    def add_workbench(self, project: str, zone: str, name: str,
                      machine_type: str = "g2-standard-8", *,
                      accelerators: list[tuple[str, int]] | None = None,
                      vm_accelerators: list[tuple[str, int]] | None = None,
                      state: str = "ACTIVE", labels: dict[str, str] | None = None,
                      vm_label: bool = True, creator: str = "ana@example.com",
                      created: datetime | None = None) -> FakeWorkbench:
        """A Workbench instance and its VM (`vm_accelerators`: the VM's, as Compute names
        them; a g2 VM's L4 is in its machine type)."""
        with self._lock:
            vm = self.add_instance(
                project, zone, name, machine_type,
                status="RUNNING" if state == "ACTIVE" else "TERMINATED",
                labels={NOTEBOOK_LABEL: ""} if vm_label else {},
                accelerators=vm_accelerators, created=created)
            bench = FakeWorkbench(project, zone, name, vm, list(accelerators or []),
                                  state=state, labels=dict(labels or {}), creator=creator)
            if created is not None:
                bench.created = created
            self._benches[(project, zone, name)] = bench
            return bench

    def workbench(self, project: str, zone: str, name: str) -> FakeWorkbench:
        with self._lock:
            return self._benches[(project, zone, name)]

    def _workbench_list(self, project: str, zone: str, query: dict[str, str],
                        body: Any) -> tuple[int, Any]:
        if project in self.workbench_disabled:
            return 403, disabled_api(project, "Notebooks API", "notebooks.googleapis.com")
        if project in self.workbench_denied:
            return 403, error(403, "Permission 'notebooks.instances.list' denied on "
                                   f"'projects/{project}/locations/-'", reason="forbidden")
        with self._lock:
            self._tpu_complete_due()
            return 200, location_page(self._benches.values(), project, zone, query,
                                      "instances")

    def _bench_find(self, project: str, zone: str, name: str) -> FakeWorkbench | None:
        with self._lock:
            self._tpu_complete_due()
            return self._benches.get((project, zone, name))

    def _workbench_get(self, project: str, zone: str, name: str, query: dict[str, str],
                       body: Any) -> tuple[int, Any]:
        bench = self._bench_find(project, zone, name)
        if bench is None:
            return 404, error(404, f"Resource '{name}' was not found")
        return 200, bench.to_json()

    def _workbench_stop(self, project: str, zone: str, name: str, query: dict[str, str],
                        body: Any) -> tuple[int, Any]:
        return self._bench_power(project, zone, name, "stop",
                                 ("STOPPING", "STOPPING"), ("STOPPED", "TERMINATED"))

    def _workbench_start(self, project: str, zone: str, name: str, query: dict[str, str],
                         body: Any) -> tuple[int, Any]:
        return self._bench_power(project, zone, name, "start",
                                 ("STARTING", "STAGING"), ("ACTIVE", "RUNNING"))

    def _bench_power(self, project: str, zone: str, name: str, verb: str,
                     interim: tuple[str, str], done: tuple[str, str]) -> tuple[int, Any]:
        bench = self._bench_find(project, zone, name)
        if bench is None:
            return 404, error(404, f"Resource '{name}' was not found")

        def apply(b: FakeWorkbench) -> None:
            b.state, b.vm.status = done
        with self._lock:
            bench.state, bench.vm.status = interim
            return self._tpu_new_operation(bench, verb, apply, _WorkbenchOperation)

    def _workbench_patch(self, project: str, zone: str, name: str, query: dict[str, str],
                         body: Any) -> tuple[int, Any]:
        bench = self._bench_find(project, zone, name)
        if bench is None:
            return 404, error(404, f"Resource '{name}' was not found")
        mask = [p.strip() for p in (query.get("updateMask") or "").split(",") if p.strip()]
        if mask != ["labels"]:
            return 400, error(400, f"the fake updates labels only, not {mask}")
        labels = dict(body.get("labels") or {})

        def apply(b: FakeWorkbench) -> None:
            b.labels = labels
        return self._tpu_new_operation(bench, "update", apply, _WorkbenchOperation)
