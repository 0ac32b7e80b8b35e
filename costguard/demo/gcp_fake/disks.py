"""Disks, snapshots and instance deletion for the Compute fake (`FakeCompute` mixes it in).

Implemented: `disks.createSnapshot` (zonal disks attached to a fake VM; requestId honoured,
409 for a snapshot name that exists, the snapshot READY when its operation completes),
`disks.get` and `disks.aggregatedList` (size, type and users, for what a stopped VM still
costs; the list pages and takes the regex `filter` like instances), and `instances.delete`
(the VM disappears when its operation completes; disks with autoDelete false stay in
`detached_disks`). Tests may inject `snapshot_error` to make a snapshot operation fail.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from costguard.demo.gcp_fake.filter import aggregated
from costguard.demo.gcp_fake.http import error

if TYPE_CHECKING:
    from costguard.demo.gcp_fake.records import FakeOperation, FakeVm

_BASE = "https://www.googleapis.com/compute/v1"


@dataclass
class FakeDisk:
    name: str
    size_gb: int = 100
    disk_type: str = "pd-balanced"
    auto_delete: bool = True
    boot: bool = False
    scratch: bool = False  # a local SSD: no snapshots

    def attached_json(self, project: str, zone: str, index: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "compute#attachedDisk", "index": index, "boot": self.boot,
            "autoDelete": self.auto_delete, "deviceName": self.name,
            "diskSizeGb": str(self.size_gb), "mode": "READ_WRITE",
            "type": "SCRATCH" if self.scratch else "PERSISTENT",
        }
        if not self.scratch:
            body["source"] = f"{_BASE}/projects/{project}/zones/{zone}/disks/{self.name}"
            body["interface"] = "SCSI"
        else:
            body["interface"] = "NVME"
        if self.boot:  # an image's disk: its licence and the guest OS features it declares
            body["architecture"] = "X86_64"
            body["licenses"] = [
                f"{_BASE}/projects/debian-cloud/global/licenses/debian-12-bookworm"]
            body["guestOsFeatures"] = [{"type": t} for t in (
                "UEFI_COMPATIBLE", "VIRTIO_SCSI_MULTIQUEUE", "GVNIC", "SEV_CAPABLE",
                "SEV_SNP_CAPABLE", "SEV_LIVE_MIGRATABLE_V2", "IDPF")]
        return body


def disk_json(project: str, zone: str, d: FakeDisk, users: list[str]) -> dict[str, Any]:
    zone_url = f"{_BASE}/projects/{project}/zones/{zone}"
    return {"kind": "compute#disk", "name": d.name, "sizeGb": str(d.size_gb),
            "type": f"{zone_url}/diskTypes/{d.disk_type}", "zone": zone_url,
            "status": "READY", "selfLink": f"{zone_url}/disks/{d.name}",
            "users": [f"{zone_url}/instances/{u}" for u in users]}


class DiskOps:
    """Handlers for FakeCompute; relies on its `_lock`, `_vms`, `_mutate` and `_request_ids`."""

    _lock: threading.RLock
    _vms: dict[tuple[str, str, str], FakeVm]
    _request_ids: dict[str, FakeOperation]
    _ops: dict[tuple[str, str, str], FakeOperation]
    unreachable_zones: set[str]

    def _init_disks(self) -> None:
        self.snapshots: dict[tuple[str, str], dict[str, Any]] = {}  # (project, name) -> json
        self.detached_disks: list[tuple[str, str, FakeDisk]] = []  # (project, zone, disk)
        self.snapshot_error: str | None = None  # the next snapshot operations fail with it
        self._snap_ids = itertools.count(7_000_000)

    def _mutate(self, project: str, zone: str, name: str, kind: str, query: dict[str, str],
                apply: Any, interim: str | None) -> tuple[int, Any]:
        raise NotImplementedError  # FakeCompute's

    def _disk_owner(self, project: str, zone: str, disk: str) -> tuple[FakeVm, FakeDisk] | None:
        for (p, z, _), vm in self._vms.items():
            if (p, z) == (project, zone):
                for d in vm.disks:
                    if d.name == disk and not d.scratch:
                        return vm, d
        return None

    def _create_snapshot(self, project: str, zone: str, disk: str, query: dict[str, str],
                         body: Any) -> tuple[int, Any]:
        with self._lock:
            request_id = query.get("requestId")
            if request_id and request_id in self._request_ids:
                return 200, self._request_ids[request_id].to_json()
            owner = self._disk_owner(project, zone, disk)
            if owner is None:
                return 404, error(404, f"The resource 'projects/{project}/zones/{zone}/disks/"
                                       f"{disk}' was not found")
            vm, found = owner
            name = str(body.get("name") or f"snapshot-{next(self._snap_ids)}")
            if (project, name) in self.snapshots:
                return 409, error(409, f"The resource 'projects/{project}/global/snapshots/"
                                       f"{name}' already exists", reason="alreadyExists")
            snap: dict[str, Any] = {
                "kind": "compute#snapshot", "id": str(next(self._snap_ids)), "name": name,
                "status": "CREATING", "sourceDisk": f"{_BASE}/projects/{project}/zones/{zone}/"
                                                    f"disks/{disk}",
                "diskSizeGb": str(found.size_gb), "labels": dict(body.get("labels") or {}),
                "description": body.get("description", ""),
            }
            self.snapshots[(project, name)] = snap
            failure = self.snapshot_error

            def apply(_vm: FakeVm) -> None:
                snap["status"] = "FAILED" if failure else "READY"

            status, op = self._mutate(project, zone, vm.name, "createSnapshot", query, apply,
                                      interim=None)
            if failure and status == 200:
                self._ops[(project, zone, op["name"])].errors = (("SNAPSHOT_FAILED", failure),)
                op = self._ops[(project, zone, op["name"])].to_json()
            return status, op

    def _disk_get(self, project: str, zone: str, disk: str, query: dict[str, str],
                  body: Any) -> tuple[int, Any]:
        with self._lock:
            owner = self._disk_owner(project, zone, disk)
            if owner is None:
                return 404, error(404, f"disk {disk} not found")
            vm, d = owner
            return 200, disk_json(project, zone, d, [vm.name])

    def _disk_aggregated_list(self, project: str, query: dict[str, str], body: Any
                              ) -> tuple[int, Any]:
        with self._lock:
            listed = [(z, disk_json(p, z, d, [vm.name]))
                      for (p, z, _), vm in self._vms.items() if p == project
                      for d in vm.disks if not d.scratch]
            listed += [(z, disk_json(p, z, d, [])) for p, z, d in self.detached_disks
                       if p == project]
        listed.sort(key=lambda zr: (zr[0], zr[1]["name"]))
        return aggregated(listed, query, kind="compute#diskAggregatedList", key="disks",
                          unreachable=self.unreachable_zones)

    def _delete(self, project: str, zone: str, name: str, query: dict[str, str],
                body: Any) -> tuple[int, Any]:
        def apply(vm: FakeVm) -> None:
            self._vms.pop((vm.project, vm.zone, vm.name), None)
            self.detached_disks += [(vm.project, vm.zone, d) for d in vm.disks
                                    if not d.auto_delete and not d.scratch]

        return self._mutate(project, zone, name, "delete", query, apply, interim="STOPPING")

