"""Managed instance groups and autoscalers in the Compute fake (handlers for FakeCompute).

Implemented: instanceGroupManagers aggregatedList (zonal and regional groups, keyed
`zones/Z` and `regions/R` as the API does), get (zonal and regional), deleteInstances
(zonal and regional: the members are deleted and `targetSize` drops by as many), resize
(zonal and regional: members are added or the newest deleted to match), and
autoscalers aggregatedList and get (zonal and regional). Members carry the `created-by`
metadata item with the group's partial URL, as GCE writes it. A group heals as a real one
does: a member that stops or vanishes other than through deleteInstances is recreated under
a new id at the next request (the reason stopping a member saves nothing).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from costguard.demo.gcp_fake.http import error

_BASE = "https://www.googleapis.com/compute/v1"


@dataclass
class FakeMig:
    project: str
    name: str
    location: str  # zone (zonal group) or region (regional group)
    regional: bool
    zone: str  # where its members run
    target_size: int
    machine_type: str
    accelerators: list[tuple[str, int]]
    autoscaler_min: int | None = None  # None: no autoscaler
    autoscaler_max: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    members: list[str] = field(default_factory=list)  # VM names
    recreated: int = 0

    @property
    def where(self) -> str:
        return f"{'regions' if self.regional else 'zones'}/{self.location}"

    @property
    def url(self) -> str:
        return f"{_BASE}/projects/{self.project}/{self.where}/instanceGroupManagers/{self.name}"

    def created_by(self, project_number: str) -> str:
        return f"projects/{project_number}/{self.where}/instanceGroupManagers/{self.name}"

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "compute#instanceGroupManager", "name": self.name,
            "id": str(abs(hash(self.url)) % 10**15), "baseInstanceName": self.name,
            "targetSize": self.target_size, "selfLink": self.url,
            "instanceGroup": self.url.replace("instanceGroupManagers", "instanceGroups"),
            "instanceTemplate": f"{_BASE}/projects/{self.project}/global/instanceTemplates/"
                                f"{self.name}-template",
            "status": {"isStable": True},
        }
        body["region" if self.regional else "zone"] = \
            f"{_BASE}/projects/{self.project}/{self.where}"
        if self.autoscaler_min is not None:
            body["status"]["autoscaler"] = self._autoscaler_url
        return body

    @property
    def _autoscaler_url(self) -> str:
        return f"{_BASE}/projects/{self.project}/{self.where}/autoscalers/{self.name}-as"

    def autoscaler_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "compute#autoscaler", "name": f"{self.name}-as", "target": self.url,
            "selfLink": self._autoscaler_url,
            "autoscalingPolicy": {"minNumReplicas": self.autoscaler_min,
                                  "maxNumReplicas": self.autoscaler_max, "mode": "ON"}}
        body["region" if self.regional else "zone"] = \
            f"{_BASE}/projects/{self.project}/{self.where}"
        return body


class GroupOps:
    """Handlers for FakeCompute; relies on its `_lock`, `_vms` and `add_instance`."""

    _lock: threading.RLock
    _vms: dict[tuple[str, str, str], Any]
    project_number = "123456789012"

    add_instance: Any  # FakeCompute's

    def _init_groups(self) -> None:
        self.migs: dict[tuple[str, str, str], FakeMig] = {}  # (project, location, name)
        self._member_serial = itertools.count(1)

    def add_mig(self, project: str, name: str, *, zone: str, size: int,
                regional: bool = False, machine_type: str = "g2-standard-4",
                accelerators: list[tuple[str, int]] | None = None,
                autoscaler: tuple[int, int] | None = None,
                labels: dict[str, str] | None = None) -> FakeMig:
        """A group of `size` running members in `zone` (a regional group spans its region
        but keeps its members in `zone` here)."""
        location = zone.rsplit("-", 1)[0] if regional else zone
        mig = FakeMig(project, name, location, regional, zone, size, machine_type,
                      list(accelerators or [("nvidia-l4", 1)]),
                      autoscaler[0] if autoscaler else None,
                      autoscaler[1] if autoscaler else None, dict(labels or {}))
        with self._lock:
            self.migs[(project, location, name)] = mig
            for _ in range(size):
                self._new_member(mig)
        return mig

    def _new_member(self, mig: FakeMig) -> None:
        vm_name = f"{mig.name}-{next(self._member_serial):04x}"
        self.add_instance(mig.project, mig.zone, vm_name, mig.machine_type,
                          accelerators=mig.accelerators, labels=dict(mig.labels),
                          metadata={"created-by": mig.created_by(self.project_number)})
        mig.members.append(vm_name)

    def _heal_groups(self) -> None:
        """Recreate members that stopped or vanished (not through deleteInstances), and
        match the members to the target size after a resize."""
        for mig in self.migs.values():
            for vm_name in list(mig.members):
                vm = self._vms.get((mig.project, mig.zone, vm_name))
                if vm is None or vm.status in ("STOPPING", "TERMINATED"):
                    self._vms.pop((mig.project, mig.zone, vm_name), None)
                    mig.members.remove(vm_name)
                    mig.recreated += 1  # the loop below puts a new one in its place
            while len(mig.members) > mig.target_size:  # resized down: the newest go
                self._vms.pop((mig.project, mig.zone, mig.members.pop()), None)
            while len(mig.members) < mig.target_size:
                self._new_member(mig)

    def _mig(self, project: str, location: str, name: str) -> FakeMig | None:
        return self.migs.get((project, location, name))

    def _mig_aggregated(self, project: str, query: dict[str, str], body: Any
                        ) -> tuple[int, Any]:
        return self._grouped(project, "instanceGroupManagers", FakeMig.to_json,
                             "compute#instanceGroupManagerAggregatedList")

    def _autoscaler_aggregated(self, project: str, query: dict[str, str], body: Any
                               ) -> tuple[int, Any]:
        return self._grouped(project, "autoscalers", FakeMig.autoscaler_json,
                             "compute#autoscalerAggregatedList", autoscaled=True)

    def _grouped(self, project: str, key: str, render: Any, kind: str,
                 autoscaled: bool = False) -> tuple[int, Any]:
        items: dict[str, Any] = {}
        with self._lock:
            for mig in sorted(self.migs.values(), key=lambda m: (m.where, m.name)):
                if mig.project != project or (autoscaled and mig.autoscaler_min is None):
                    continue
                items.setdefault(mig.where, {key: []})[key].append(render(mig))
        return 200, {"kind": kind, "items": items}

    def _mig_get(self, project: str, location: str, name: str, query: dict[str, str],
                 body: Any) -> tuple[int, Any]:
        with self._lock:
            mig = self._mig(project, location, name)
            if mig is None:
                return 404, error(404, f"instanceGroupManager {name} not found")
            return 200, mig.to_json()

    def _autoscaler_get(self, project: str, location: str, name: str,
                        query: dict[str, str], body: Any) -> tuple[int, Any]:
        with self._lock:
            mig = next((m for m in self.migs.values() if m.project == project
                        and m.location == location and f"{m.name}-as" == name
                        and m.autoscaler_min is not None), None)
            if mig is None:
                return 404, error(404, f"autoscaler {name} not found")
            return 200, mig.autoscaler_json()

    def _mig_delete_instances(self, project: str, location: str, name: str,
                              query: dict[str, str], body: Any) -> tuple[int, Any]:
        with self._lock:
            mig = self._mig(project, location, name)
            if mig is None:
                return 404, error(404, f"instanceGroupManager {name} not found")
            wanted = [u.rstrip("/").rsplit("/", 1)[-1] for u in (body or {}).get("instances", [])]
            strangers = [n for n in wanted if n not in mig.members]
            if strangers:
                return 400, error(400, f"instances {', '.join(strangers)} are not members of "
                                       f"{name}", reason="invalid")
            for vm_name in wanted:
                mig.members.remove(vm_name)
                self._vms.pop((mig.project, mig.zone, vm_name), None)
                mig.target_size -= 1
            return 200, {"kind": "compute#operation", "name": f"operation-mig-{name}",
                         "operationType": "compute.instanceGroupManagers.deleteInstances",
                         "targetLink": mig.url, "status": "DONE", "progress": 100,
                         mig.where.split("/")[0][:-1]:
                             f"{_BASE}/projects/{project}/{mig.where}"}


    def _mig_resize(self, project: str, location: str, name: str, query: dict[str, str],
                    body: Any) -> tuple[int, Any]:
        with self._lock:
            mig = self._mig(project, location, name)
            if mig is None:
                return 404, error(404, f"instanceGroupManager {name} not found")
            try:
                size = int(query["size"])
            except (KeyError, ValueError):
                return 400, error(400, "size: a whole number is required", reason="invalid")
            mig.target_size = size
            return 200, {"kind": "compute#operation", "name": f"operation-resize-{name}",
                         "operationType": "compute.instanceGroupManagers.resize",
                         "targetLink": mig.url, "status": "DONE", "progress": 100}


_P = r"/compute/v1/projects/(?P<project>[^/]+)"
_L = _P + r"/(?:zones|regions)/(?P<location>[^/]+)"
GROUP_ROUTES: tuple[tuple[str, str, str], ...] = (
    (_P + r"/aggregated/instanceGroupManagers$", "GET", "mig_aggregated"),
    (_P + r"/aggregated/autoscalers$", "GET", "autoscaler_aggregated"),
    (_L + r"/instanceGroupManagers/(?P<name>[^/]+)$", "GET", "mig_get"),
    (_L + r"/instanceGroupManagers/(?P<name>[^/]+)/deleteInstances$", "POST",
     "mig_delete_instances"),
    (_L + r"/instanceGroupManagers/(?P<name>[^/]+)/resize$", "POST", "mig_resize"),
    (_L + r"/autoscalers/(?P<name>[^/]+)$", "GET", "autoscaler_get"),
)
