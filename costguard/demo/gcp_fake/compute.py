"""A local, stateful fake of the Compute Engine REST API, for tests and the demo.

Served over HTTP on 127.0.0.1 so the real `google-cloud-compute` client drives it
(`client_options={"api_endpoint": "http://127.0.0.1:PORT"}`, anonymous credentials).

Implemented: instances aggregatedList (maxResults/pageToken paging across zones, the
regex form of `filter`: fake_filter.py), get, stop, start, setLabels (labelFingerprint
checked, 412 on mismatch, requestId honoured), delete, disks createSnapshot, get and
aggregatedList (fake_disks.py), partial responses (`fields`: fields.py), zone operations
get/wait (done after `operation_delay_s`), Resource Manager v3 projects.list /
folders.list, and injected failures: 429/503 on demand, 403 for a forbidden project or a
disabled API. Not implemented: insert, AIP-160 filters, regional operations, every other
Compute method (501). Managed instance groups and autoscalers: fake_groups.py. Cloud TPU
nodes (the TPU API v2, /v2/...): tpu.py.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any

from costguard.demo.gcp_fake.addresses import ADDRESS_ROUTES, AddressOps
from costguard.demo.gcp_fake.disks import DiskOps, FakeDisk
from costguard.demo.gcp_fake.filter import aggregated
from costguard.demo.gcp_fake.groups import GROUP_ROUTES, GroupOps
from costguard.demo.gcp_fake.http import LoopbackServer, error, forbidden, handler_for
from costguard.demo.gcp_fake.records import FakeOperation, FakeVm
from costguard.demo.gcp_fake.reservations import RESERVATION_ROUTES, ReservationOps
from costguard.demo.gcp_fake.snapshots import SNAPSHOT_ROUTES, SnapshotOps
from costguard.demo.gcp_fake.tpu import TPU_ROUTES, FakeTpuNode, TpuOps
from costguard.demo.gcp_fake.workbench import WORKBENCH_ROUTES, WorkbenchOps

__all__ = ["FakeCompute", "FakeDisk", "FakeOperation", "FakeTpuNode", "FakeVm"]

_ID_START = 4_000_000_000_000_000_000


def _unchanged(_vm: FakeVm) -> None:
    pass


@dataclass
class _Injected:
    status: int
    remaining: int
    path_contains: str


class FakeCompute(DiskOps, GroupOps, TpuOps, ReservationOps, AddressOps, SnapshotOps,
                  WorkbenchOps):
    """State of the fake plus the HTTP server. Thread-safe; use as a context manager."""

    def __init__(self, *, operation_delay_s: float = 0.0, max_wait_s: float = 2.0) -> None:
        self.operation_delay_s = operation_delay_s
        self.max_wait_s = max_wait_s  # how long operations.wait blocks at most
        self._lock = threading.RLock()
        self._vms: dict[tuple[str, str, str], FakeVm] = {}
        self._ops: dict[tuple[str, str, str], FakeOperation] = {}
        self._request_ids: dict[str, FakeOperation] = {}
        self._ids = itertools.count(_ID_START)
        self._op_ids = itertools.count(1)
        self._forbidden: dict[str, str] = {}
        self._injected: list[_Injected] = []
        # zones whose VMs and disks aggregated lists leave out, with an UNREACHABLE warning
        self.unreachable_zones: set[str] = set()
        self.folders: dict[str, list[str]] = {}  # parent -> child folders ("folders/N")
        self.folder_projects: dict[str, list[str]] = {}  # parent -> project ids
        self.calls: Counter[str] = Counter()  # "GET aggregated_list" etc.
        # what instances.start stamps as the VM's lastStartTimestamp (tests set their clock)
        self.now: Callable[[], datetime] = lambda: datetime.now(UTC)
        self.batch_sizes: list[int] = []  # the calls of each batch request, in order
        # the `fields` selections requests named (partial responses: fields.py), in order;
        # True: answer each with a 400, as an API or proxy that does not take them
        self.field_masks: list[str] = []
        self.reject_field_masks = False
        # operation kind ("stop", "start", "setLabels") -> the (code, message) errors its
        # operations end with, as GCE reports a stop it could not carry out (nothing changes)
        self.failing_operations: dict[str, tuple[tuple[str, str], ...]] = {}
        # Called as hook(method, path) before each request: lets a test change state at
        # the exact moment a call arrives (e.g. relabel a VM just before setLabels).
        self.on_request: Callable[[str, str], None] | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._init_disks()
        self._init_groups()
        self._init_tpus()
        self._init_workbench()
        self._init_reservations()
        self._init_addresses()
        self._init_snapshots()

    # ---- state the tests drive -------------------------------------------------------
    def add_instance(
        self,
        project: str,
        zone: str,
        name: str,
        machine_type: str = "n1-standard-8",
        *,
        status: str = "RUNNING",
        labels: dict[str, str] | None = None,
        accelerators: list[tuple[str, int]] | None = None,
        spot: bool = False,
        preemptible: bool = False,
        created: datetime | None = None,
        last_start: datetime | None = None,
        disks: list[FakeDisk] | None = None,
        service_account: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> FakeVm:
        with self._lock:
            vm = FakeVm(
                project=project,
                zone=zone,
                name=name,
                id=next(self._ids),
                machine_type=machine_type,
                status=status,
                labels=dict(labels or {}),
                accelerators=list(accelerators or []),
                provisioning_model="SPOT" if spot else "STANDARD",
                preemptible=preemptible,
                # a VM has a boot disk unless a test says otherwise
                disks=list(disks) if disks is not None else [
                    FakeDisk(name, size_gb=100, boot=True)],
                service_account=service_account,
                metadata=dict(metadata or {}),
            )
            if created is not None:
                vm.created = created
            vm.last_start = last_start
            self._vms[(project, zone, name)] = vm
            return vm

    def instance(self, project: str, zone: str, name: str) -> FakeVm:
        with self._lock:
            return self._vms[(project, zone, name)]

    def set_status(self, project: str, zone: str, name: str, status: str) -> None:
        with self._lock:
            self._vms[(project, zone, name)].status = status

    def relabel(self, project: str, zone: str, name: str, labels: dict[str, str]) -> None:
        """Someone else changes the labels (bumps the fingerprint)."""
        with self._lock:
            vm = self._vms[(project, zone, name)]
            vm.labels = dict(labels)
            vm.label_version += 1

    def forbid_project(self, project: str, *, api_disabled: bool = False) -> None:
        with self._lock:
            self._forbidden[project] = "SERVICE_DISABLED" if api_disabled else "forbidden"

    def inject(self, status: int, *, times: int = 1, path_contains: str = "") -> None:
        """The next `times` requests whose path contains `path_contains` answer `status`
        (`http.RESET`: the connection is reset, no answer)."""
        with self._lock:
            self._injected.append(_Injected(status, times, path_contains))

    # ---- server ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeCompute is not started; call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeCompute:
        server = LoopbackServer(("127.0.0.1", 0), handler_for(self.handle, self._on_batch,
                                                              self._on_fields))
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeCompute:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- request handling ------------------------------------------------------------
    def _on_fields(self, mask: str) -> bool:
        with self._lock:
            self.field_masks.append(mask)
            return not self.reject_field_masks

    def _on_batch(self, calls: int) -> None:
        with self._lock:
            self.calls["POST batch"] += 1
            self.batch_sizes.append(calls)

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        if self.on_request is not None:
            self.on_request(method, path)
        with self._lock:
            for inj in self._injected:
                if inj.remaining > 0 and inj.path_contains in path:
                    inj.remaining -= 1
                    self.calls[f"{method} injected-{inj.status}"] += 1
                    return inj.status, error(inj.status, "injected failure")
            self._complete_due_operations()
            self._heal_groups()
        for pattern, verb, action in _ROUTES:
            m = pattern.match(path)
            if m and verb == method:
                self.calls[f"{method} {action}"] += 1
                project = m.groupdict().get("project")
                with self._lock:
                    if project and project in self._forbidden:
                        return 403, forbidden(project, self._forbidden[project])
                handler = getattr(self, f"_{action}")
                result: tuple[int, Any] = handler(query=query, body=body, **m.groupdict())
                return result
        return 501, error(501, f"the fake does not implement {method} {path}")

    def _aggregated_list(self, project: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        with self._lock:
            vms = sorted(
                (v for v in self._vms.values() if v.project == project),
                key=lambda v: (v.zone, v.name),
            )
            listed = [(vm.zone, vm.to_json()) for vm in vms]
        return aggregated(listed, query, kind="compute#instanceAggregatedList", key="instances",
                          unreachable=self.unreachable_zones)

    @property
    def request_ids(self) -> list[str]:
        """The requestIds of the mutations received, in order (repeats answered once)."""
        with self._lock:
            return list(self._request_ids)

    def remove_instance(self, project: str, zone: str, name: str) -> None:
        """The VM is deleted behind costguard's back (no operation)."""
        with self._lock:
            del self._vms[(project, zone, name)]

    def _get(
        self, project: str, zone: str, name: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        with self._lock:
            vm = self._vms.get((project, zone, name))
            if vm is None:
                return 404, error(
                    404,
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' "
                    "was not found",
                )
            return 200, vm.to_json()

    def _stop(
        self, project: str, zone: str, name: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        def apply(vm: FakeVm) -> None:
            vm.status = "TERMINATED"

        return self._mutate(project, zone, name, "stop", query, apply, interim="STOPPING")

    def _start(
        self, project: str, zone: str, name: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        def apply(vm: FakeVm) -> None:
            vm.status = "RUNNING"
            vm.last_start = self.now()

        return self._mutate(project, zone, name, "start", query, apply, interim="STAGING")

    def _set_labels(
        self, project: str, zone: str, name: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        with self._lock:
            vm = self._vms.get((project, zone, name))
            if vm is None:
                return 404, error(404, f"instance {name} not found")
            request_id = query.get("requestId")
            if request_id and request_id in self._request_ids:
                return 200, self._request_ids[request_id].to_json()
            if body.get("labelFingerprint") != vm.label_fingerprint:
                return 412, error(
                    412,
                    "Labels fingerprint either invalid or resource labels have changed",
                    reason="conditionNotMet",
                )
            labels = dict(body.get("labels") or {})
            vm.labels = labels
            vm.label_version += 1
            # Label changes are visible at once; the operation only reports completion.
            return self._mutate(
                project, zone, name, "setLabels", query, lambda _vm: None, interim=None
            )

    def _mutate(
        self,
        project: str,
        zone: str,
        name: str,
        kind: str,
        query: dict[str, str],
        apply: Any,
        interim: str | None,
    ) -> tuple[int, Any]:
        with self._lock:
            vm = self._vms.get((project, zone, name))
            if vm is None:
                return 404, error(404, f"instance {name} not found")
            request_id = query.get("requestId")
            if request_id and request_id in self._request_ids:
                return 200, self._request_ids[request_id].to_json()
            errors = self.failing_operations.get(kind, ())
            if errors:  # a failed operation changes nothing
                apply, interim = _unchanged, None
            op = FakeOperation(
                project,
                zone,
                f"operation-{next(self._op_ids)}-{kind}",
                kind,
                vm,
                time.monotonic() + self.operation_delay_s,
                apply,
                errors=errors,
            )
            if interim:
                vm.status = interim
            self._ops[(project, zone, op.name)] = op
            if request_id:
                self._request_ids[request_id] = op
            self._complete_due_operations()
            return 200, op.to_json()

    def _start_op(self, project: str, where: str, kind: str, target: Any, apply: Any,
                  query: dict[str, str], *, target_path: str, scope: str = "zones"
                  ) -> tuple[int, Any]:
        """An operation on a disk, address or snapshot (under the lock) in zone, region or
        "global" `where`, its requestId honoured; `apply(target)` runs when it completes."""
        request_id = query.get("requestId")
        if request_id and request_id in self._request_ids:
            return 200, self._request_ids[request_id].to_json()
        op = FakeOperation(project, where, f"operation-{next(self._op_ids)}-{kind}", kind,
                           target, time.monotonic() + self.operation_delay_s, apply,
                           target_path=target_path, scope=scope)
        self._ops[(project, where, op.name)] = op
        if request_id:
            self._request_ids[request_id] = op
        self._complete_due_operations()
        return 200, op.to_json()

    def _operation_get(
        self, project: str, zone: str, op: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        with self._lock:
            self._complete_due_operations()
            found = self._ops.get((project, zone, op))
            if found is None:
                return 404, error(404, f"operation {op} not found")
            return 200, found.to_json()

    def _operation_wait(
        self, project: str, zone: str, op: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        with self._lock:
            found = self._ops.get((project, zone, op))
        if found is None:
            return 404, error(404, f"operation {op} not found")
        time.sleep(max(0.0, min(found.done_at - time.monotonic(), self.max_wait_s)))
        with self._lock:
            self._complete_due_operations()
            return 200, found.to_json()

    def _complete_due_operations(self) -> None:
        now = time.monotonic()
        for op in self._ops.values():
            if not op.done and op.done_at <= now:
                op.apply(op.target)
                op.done = True

    def _rm_projects(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        parent = query.get("parent", "")
        with self._lock:
            ids = self.folder_projects.get(parent, [])
            return 200, {
                "projects": [
                    {"projectId": p, "name": f"projects/{p}", "state": "ACTIVE", "parent": parent}
                    for p in ids
                ]
            }

    def _rm_folders(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        parent = query.get("parent", "")
        with self._lock:
            kids = self.folders.get(parent, [])
            return 200, {
                "folders": [{"name": f, "state": "ACTIVE", "parent": parent} for f in kids]
            }


_P = r"/compute/v1/projects/(?P<project>[^/]+)"
_Z = _P + r"/zones/(?P<zone>[^/]+)"
_ROUTES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(_P + r"/aggregated/instances$"), "GET", "aggregated_list"),
    (re.compile(_P + r"/aggregated/disks$"), "GET", "disk_aggregated_list"),
    (re.compile(_Z + r"/instances/(?P<name>[^/]+)$"), "GET", "get"),
    (re.compile(_Z + r"/instances/(?P<name>[^/]+)/stop$"), "POST", "stop"),
    (re.compile(_Z + r"/instances/(?P<name>[^/]+)/start$"), "POST", "start"),
    (re.compile(_Z + r"/instances/(?P<name>[^/]+)/setLabels$"), "POST", "set_labels"),
    (re.compile(_Z + r"/instances/(?P<name>[^/]+)$"), "DELETE", "delete"),
    (re.compile(_Z + r"/disks/(?P<disk>[^/]+)/createSnapshot$"), "POST", "create_snapshot"),
    (re.compile(_Z + r"/disks/(?P<disk>[^/]+)$"), "GET", "disk_get"),
    (re.compile(_Z + r"/disks/(?P<disk>[^/]+)$"), "DELETE", "disk_delete"),
    (re.compile(_Z + r"/disks/(?P<disk>[^/]+)/setLabels$"), "POST", "disk_set_labels"),
    (re.compile(_P + r"/global/snapshots/(?P<name>[^/]+)$"), "GET", "snapshot_get"),
    (re.compile(_Z + r"/operations/(?P<op>[^/]+)$"), "GET", "operation_get"),
    (re.compile(_Z + r"/operations/(?P<op>[^/]+)/wait$"), "POST", "operation_wait"),
    (re.compile(r"/v3/projects$"), "GET", "rm_projects"),
    (re.compile(r"/v3/folders$"), "GET", "rm_folders"),
    *((re.compile(pattern), verb, action) for pattern, verb, action in GROUP_ROUTES),
    *((re.compile(pattern), verb, action) for pattern, verb, action in TPU_ROUTES),
    *((re.compile(pattern), verb, action) for pattern, verb, action in WORKBENCH_ROUTES),
    *((re.compile(pattern), verb, action) for pattern, verb, action in RESERVATION_ROUTES),
    *((re.compile(pattern), verb, action) for pattern, verb, action in ADDRESS_ROUTES),
    *((re.compile(pattern), verb, action) for pattern, verb, action in SNAPSHOT_ROUTES),
)
