"""Disks, snapshots and instance deletion for the Compute fake (`FakeCompute` mixes it in).

Implemented: `disks.createSnapshot` (zonal disks, attached to a fake VM or not; requestId
honoured, 409 for a snapshot name that exists, the snapshot READY when its operation
completes), `disks.get` and `disks.aggregatedList` (size, type, users, labels, creation and
last detach times, as the API reference's `Disk` gives them; the list pages and takes the
regex `filter` like instances), `disks.delete` (400 `resourceInUseByAnotherResource` while
a VM uses it; gone when its operation completes), `disks.setLabels` (412 on a stale
fingerprint), `snapshots.get`, and `instances.delete` (the VM disappears when its operation
completes; disks with autoDelete false stay, detached, in `detached_disks`). Tests add a
detached disk with `add_disk` and may inject `snapshot_error` to make a snapshot fail.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from costguard.demo.gcp_fake.filter import aggregated
from costguard.demo.gcp_fake.http import error

if TYPE_CHECKING:
    from costguard.demo.gcp_fake.records import FakeOperation, FakeVm

_BASE = "https://www.googleapis.com/compute/v1"
_DISK_IDS = itertools.count(5_100_000_000_000_000_000)


def fingerprint(labels: dict[str, str]) -> str:
    """A resource's labelFingerprint, as GCE's: a hash of its labels (the same labels give
    the same fingerprint, so a resource made again is not refused with a 412)."""
    digest = hashlib.sha256(repr(sorted(labels.items())).encode()).digest()[:8]
    return base64.b64encode(digest).decode()


@dataclass
class FakeDisk:
    name: str
    size_gb: int = 100
    disk_type: str = "pd-balanced"
    auto_delete: bool = True
    boot: bool = False
    scratch: bool = False  # a local SSD: no snapshots
    labels: dict[str, str] = field(default_factory=dict)
    created: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    last_detach: datetime | None = None  # `lastDetachTimestamp`, once it was detached
    source_snapshot: str | None = None  # the snapshot it was made from (a name)
    description: str = ""  # e.g. the GKE PD CSI driver's JSON for a PersistentVolume
    id: int = field(default_factory=lambda: next(_DISK_IDS))

    @property
    def label_fingerprint(self) -> str:
        return fingerprint(self.labels)

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
    body: dict[str, Any] = {
        "kind": "compute#disk", "id": str(d.id), "name": d.name, "sizeGb": str(d.size_gb),
        "type": f"{zone_url}/diskTypes/{d.disk_type}", "zone": zone_url,
        "status": "READY", "selfLink": f"{zone_url}/disks/{d.name}",
        "creationTimestamp": d.created.isoformat(timespec="milliseconds"),
        "labelFingerprint": d.label_fingerprint, "physicalBlockSizeBytes": "4096"}
    if users:  # the API leaves `users` out of a disk nothing uses
        body["users"] = [f"{zone_url}/instances/{u}" for u in users]
    if d.labels:
        body["labels"] = dict(d.labels)
    if d.last_detach is not None:
        body["lastDetachTimestamp"] = d.last_detach.isoformat(timespec="milliseconds")
    if d.description:
        body["description"] = d.description
    if d.source_snapshot:
        body["sourceSnapshot"] = (f"{_BASE}/projects/{project}/global/snapshots/"
                                  f"{d.source_snapshot}")
    return body


class DiskOps:
    """Handlers for FakeCompute; relies on its `_lock`, `_vms`, `_mutate` and `_request_ids`."""

    _lock: threading.RLock
    _vms: dict[tuple[str, str, str], FakeVm]
    _request_ids: dict[str, FakeOperation]
    _ops: dict[tuple[str, str, str], FakeOperation]
    unreachable_zones: set[str]
    operation_delay_s: float

    def _init_disks(self) -> None:
        self.snapshots: dict[tuple[str, str], dict[str, Any]] = {}  # (project, name) -> json
        self.detached_disks: list[tuple[str, str, FakeDisk]] = []  # (project, zone, disk)
        self.snapshot_error: str | None = None  # the next snapshot operations fail with it
        self._snap_ids = itertools.count(7_000_000)

    def _mutate(self, project: str, zone: str, name: str, kind: str, query: dict[str, str],
                apply: Any, interim: str | None) -> tuple[int, Any]:
        raise NotImplementedError  # FakeCompute's

    def _disk_owner(self, project: str, zone: str, disk: str
                    ) -> tuple[FakeVm | None, FakeDisk] | None:
        """The disk and the VM using it (None: detached); None when there is no such disk."""
        for (p, z, _), vm in self._vms.items():
            if (p, z) == (project, zone):
                for d in vm.disks:
                    if d.name == disk and not d.scratch:
                        return vm, d
        for p, z, d in self.detached_disks:
            if (p, z, d.name) == (project, zone, disk):
                return None, d
        return None

    def add_disk(self, project: str, zone: str, name: str, **kwargs: Any) -> FakeDisk:
        """A disk no VM uses (as after a detach, or made on its own)."""
        with self._lock:
            d = FakeDisk(name, **kwargs)
            self.detached_disks.append((project, zone, d))
            return d

    def _disk_op(self, project: str, zone: str, disk: FakeDisk, kind: str,
                 query: dict[str, str], apply: Any) -> tuple[int, Any]:
        """A zone operation on a disk (under the lock)."""
        return self._start_op(project, zone, kind, disk, apply, query, target_path="disks")

    def _start_op(self, project: str, where: str, kind: str, target: Any, apply: Any,
                  query: dict[str, str], *, target_path: str, scope: str = "zones"
                  ) -> tuple[int, Any]:
        raise NotImplementedError  # FakeCompute's

    def _disk_delete(self, project: str, zone: str, disk: str, query: dict[str, str],
                     body: Any) -> tuple[int, Any]:
        with self._lock:
            owner = self._disk_owner(project, zone, disk)
            if owner is None:
                return 404, error(404, f"The resource 'projects/{project}/zones/{zone}/disks/"
                                       f"{disk}' was not found", reason="notFound")
            vm, d = owner
            if vm is not None:
                return 400, error(400, f"The disk resource 'projects/{project}/zones/{zone}/"
                                       f"disks/{disk}' is already being used by "
                                       f"'projects/{project}/zones/{zone}/instances/{vm.name}'",
                                  reason="resourceInUseByAnotherResource")

            def gone(_d: FakeDisk) -> None:
                self.detached_disks[:] = [e for e in self.detached_disks
                                          if e != (project, zone, d)]

            return self._disk_op(project, zone, d, "delete", query, gone)

    def _disk_set_labels(self, project: str, zone: str, disk: str, query: dict[str, str],
                         body: Any) -> tuple[int, Any]:
        with self._lock:
            owner = self._disk_owner(project, zone, disk)
            if owner is None:
                return 404, error(404, f"disk {disk} not found", reason="notFound")
            _, d = owner
            if body.get("labelFingerprint") != d.label_fingerprint:
                return 412, error(412, "Labels fingerprint either invalid or resource labels "
                                       "have changed", reason="conditionNotMet")
            labels = dict(body.get("labels") or {})

            def relabel(target: FakeDisk) -> None:
                target.labels = labels

            return self._disk_op(project, zone, d, "setLabels", query, relabel)

    def _snapshot_get(self, project: str, name: str, query: dict[str, str], body: Any
                      ) -> tuple[int, Any]:
        with self._lock:
            self._complete_due_operations()
            snap = self.snapshots.get((project, name))
            if snap is None:
                return 404, error(404, f"The resource 'projects/{project}/global/snapshots/"
                                       f"{name}' was not found", reason="notFound")
            return 200, dict(snap, labelFingerprint=fingerprint(snap.get("labels") or {}))

    def _complete_due_operations(self) -> None:
        raise NotImplementedError  # FakeCompute's

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

            def apply(_target: Any) -> None:
                snap["status"] = "FAILED" if failure else "READY"

            if vm is None:  # a detached disk: an operation on the disk itself
                status, op = self._disk_op(project, zone, found, "createSnapshot", query,
                                           apply)
            else:
                status, op = self._mutate(project, zone, vm.name, "createSnapshot", query,
                                          apply, interim=None)
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
            return 200, disk_json(project, zone, d, [vm.name] if vm is not None else [])

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

