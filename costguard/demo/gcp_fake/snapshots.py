"""Disk snapshots, images and instance templates for the Compute fake (`FakeCompute` mixes
it in), with the fields of the API reference's `Snapshot`, `Image` and `InstanceTemplate`.

Implemented: `snapshots.list` (paged, `maxResults`/`pageToken`), `snapshots.delete` and
`snapshots.setLabels` (412 on a stale fingerprint) through global operations
(`globalOperations.get` / `wait`), `images.list` (an image's `sourceSnapshot`) and
`instanceTemplates.aggregatedList` (global and regional templates, a disk's
`initializeParams.sourceSnapshot`). Snapshots live in `snapshots` (DiskOps's, where
`disks.createSnapshot` puts them); tests add more with `add_snapshot`, and images and
templates with `add_image` and `add_instance_template`.
"""

from __future__ import annotations

import base64
import itertools
import threading
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from costguard.demo.gcp_fake.disks import fingerprint
from costguard.demo.gcp_fake.filter import aggregated
from costguard.demo.gcp_fake.http import error

_BASE = "https://www.googleapis.com/compute/v1"
_IDS = itertools.count(6_900_000_000_000_000_000)


_P = r"/compute/v1/projects/(?P<project>[^/]+)"
SNAPSHOT_ROUTES: tuple[tuple[str, str, str], ...] = (
    (_P + r"/global/snapshots$", "GET", "snapshot_list"),
    (_P + r"/global/snapshots/(?P<name>[^/]+)$", "DELETE", "snapshot_delete"),
    (_P + r"/global/snapshots/(?P<name>[^/]+)/setLabels$", "POST", "snapshot_set_labels"),
    (_P + r"/global/images$", "GET", "image_list"),
    (_P + r"/aggregated/instanceTemplates$", "GET", "template_aggregated_list"),
    (_P + r"/global/operations/(?P<op>[^/]+)$", "GET", "global_operation_get"),
    (_P + r"/global/operations/(?P<op>[^/]+)/wait$", "POST", "global_operation_wait"),
)


class SnapshotOps:
    """Snapshots beyond createSnapshot, images and templates (under FakeCompute's lock)."""

    _lock: threading.RLock
    snapshots: dict[tuple[str, str], dict[str, Any]]

    def _init_snapshots(self) -> None:
        self.images: dict[tuple[str, str], dict[str, Any]] = {}
        self.templates: list[tuple[str, str | None, dict[str, Any]]] = []  # project, region

    def _complete_due_operations(self) -> None:
        raise NotImplementedError  # FakeCompute's

    def add_snapshot(self, project: str, name: str, *, source_disk: str = "old-disk",
                     zone: str = "us-central1-a", size_gb: int = 100,
                     labels: dict[str, str] | None = None, created: datetime | None = None,
                     auto_created: bool = False, status: str = "READY",
                     description: str = "") -> dict[str, Any]:
        with self._lock:
            snap: dict[str, Any] = {
                "kind": "compute#snapshot", "id": str(next(_IDS)), "name": name,
                "status": status, "diskSizeGb": str(size_gb),
                "sourceDisk": f"{_BASE}/projects/{project}/zones/{zone}/disks/{source_disk}",
                "storageBytes": str(size_gb * 2**30 // 3), "storageBytesStatus": "UP_TO_DATE",
                "creationTimestamp": (created or datetime(2026, 1, 1, tzinfo=UTC)).isoformat(
                    timespec="milliseconds"),
                "selfLink": f"{_BASE}/projects/{project}/global/snapshots/{name}",
                "storageLocations": ["us"], "snapshotType": "STANDARD",
                "autoCreated": auto_created, "labels": dict(labels or {}),
                "description": description}
            self.snapshots[(project, name)] = snap
            return snap

    def add_image(self, project: str, name: str, source_snapshot: str) -> None:
        with self._lock:
            self.images[(project, name)] = {
                "kind": "compute#image", "id": str(next(_IDS)), "name": name,
                "status": "READY",
                "sourceSnapshot": f"{_BASE}/projects/{project}/global/snapshots/"
                                  f"{source_snapshot}",
                "selfLink": f"{_BASE}/projects/{project}/global/images/{name}"}

    def add_instance_template(self, project: str, name: str, source_snapshot: str,
                              region: str | None = None) -> None:
        with self._lock:
            where = f"regions/{region}" if region else "global"
            self.templates.append((project, region, {
                "kind": "compute#instanceTemplate", "id": str(next(_IDS)), "name": name,
                "selfLink": f"{_BASE}/projects/{project}/{where}/instanceTemplates/{name}",
                "properties": {"machineType": "a2-highgpu-1g", "disks": [{
                    "boot": True, "autoDelete": True, "type": "PERSISTENT",
                    "initializeParams": {"sourceSnapshot": f"global/snapshots/"
                                                           f"{source_snapshot}"}}]}}))

    @staticmethod
    def _page(items: list[dict[str, Any]], query: dict[str, str], kind: str
              ) -> tuple[int, Any]:
        size = min(int(query.get("maxResults", "500")), 500)
        offset = int(base64.urlsafe_b64decode(query["pageToken"]).decode()) \
            if "pageToken" in query else 0
        out: dict[str, Any] = {"kind": kind, "items": items[offset:offset + size]}
        if offset + size < len(items):
            out["nextPageToken"] = base64.urlsafe_b64encode(
                str(offset + size).encode()).decode()
        return 200, out

    def _snapshot_list(self, project: str, query: dict[str, str], body: Any
                       ) -> tuple[int, Any]:
        with self._lock:
            self._complete_due_operations()
            items = [dict(v, labelFingerprint=fingerprint(v.get("labels") or {}))
                     for (p, _), v in sorted(self.snapshots.items()) if p == project]
        return self._page(items, query, "compute#snapshotList")

    def _image_list(self, project: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        with self._lock:
            items = [v for (p, _), v in sorted(self.images.items()) if p == project]
        return self._page(items, query, "compute#imageList")

    def _template_aggregated_list(self, project: str, query: dict[str, str], body: Any
                                  ) -> tuple[int, Any]:
        with self._lock:
            listed = [(region or "global", t) for p, region, t in self.templates
                      if p == project]
        status, out = aggregated(listed, query, kind="compute#instanceTemplateAggregatedList",
                                 key="instanceTemplates")
        if status == 200:
            out["items"] = {(k.replace("zones/", "regions/", 1) if k != "zones/global"
                             else "global"): v for k, v in out["items"].items()}
        return status, out

    def _global_op(self, project: str, name: str, kind: str, query: dict[str, str],
                   apply: Any) -> tuple[int, Any]:
        return self._start_op(project, "global", kind, SimpleNamespace(name=name, id=0),
                              apply, query, target_path="snapshots", scope="global")

    def _start_op(self, project: str, where: str, kind: str, target: Any, apply: Any,
                  query: dict[str, str], *, target_path: str, scope: str = "zones"
                  ) -> tuple[int, Any]:
        raise NotImplementedError  # FakeCompute's

    def _snapshot_delete(self, project: str, name: str, query: dict[str, str], body: Any
                         ) -> tuple[int, Any]:
        with self._lock:
            if (project, name) not in self.snapshots:
                return 404, error(404, f"The resource 'projects/{project}/global/snapshots/"
                                       f"{name}' was not found", reason="notFound")
            return self._global_op(project, name, "delete", query,
                                   lambda _t: self.snapshots.pop((project, name), None))

    def _snapshot_set_labels(self, project: str, name: str, query: dict[str, str],
                             body: Any) -> tuple[int, Any]:
        with self._lock:
            snap = self.snapshots.get((project, name))
            if snap is None:
                return 404, error(404, f"snapshot {name} not found", reason="notFound")
            if body.get("labelFingerprint") != fingerprint(snap.get("labels") or {}):
                return 412, error(412, "Labels fingerprint either invalid or resource labels "
                                       "have changed", reason="conditionNotMet")
            labels = dict(body.get("labels") or {})
            return self._global_op(project, name, "setLabels", query,
                                   lambda _t: snap.__setitem__("labels", labels))

    # global operations live beside the zones' (keyed by project, "global", name)
    def _global_operation_get(self, project: str, op: str, query: dict[str, str], body: Any
                              ) -> tuple[int, Any]:
        return self._operation_get(project, "global", op, query, body)

    def _global_operation_wait(self, project: str, op: str, query: dict[str, str],
                               body: Any) -> tuple[int, Any]:
        return self._operation_wait(project, "global", op, query, body)

    def _operation_get(self, project: str, zone: str, op: str, query: dict[str, str],
                       body: Any) -> tuple[int, Any]:
        raise NotImplementedError  # FakeCompute's

    def _operation_wait(self, project: str, zone: str, op: str, query: dict[str, str],
                        body: Any) -> tuple[int, Any]:
        raise NotImplementedError  # FakeCompute's
