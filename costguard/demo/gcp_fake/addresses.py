"""Static addresses for the Compute fake (`FakeCompute` mixes it in).

Implemented, with the fields of the API reference's `Address` resource: `addresses.
aggregatedList` (regional addresses; pages, the regex `filter`), `addresses.get`,
`addresses.delete` (400 `resourceInUseByAnotherResource` while a user holds it; gone when
its region operation completes), `addresses.setLabels` (412 on a stale fingerprint), and
region operations (`regionOperations.get` / `wait`). Tests add addresses with
`add_address`; `users` name what holds one (a VM's URL tail `zones/Z/instances/NAME`, or a
forwarding rule's).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from costguard.demo.gcp_fake.disks import fingerprint
from costguard.demo.gcp_fake.filter import aggregated
from costguard.demo.gcp_fake.http import error

_BASE = "https://www.googleapis.com/compute/v1"
_IDS = itertools.count(6_200_000_000_000_000_000)


@dataclass
class FakeAddress:
    project: str
    region: str
    name: str
    address: str
    users: list[str] = field(default_factory=list)  # "zones/Z/instances/NAME", ...
    address_type: str = "EXTERNAL"
    labels: dict[str, str] = field(default_factory=dict)
    created: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    id: int = field(default_factory=lambda: next(_IDS))

    @property
    def label_fingerprint(self) -> str:
        return fingerprint(self.labels)

    def to_json(self) -> dict[str, Any]:
        region_url = f"{_BASE}/projects/{self.project}/regions/{self.region}"
        body: dict[str, Any] = {
            "kind": "compute#address", "id": str(self.id), "name": self.name,
            "address": self.address, "addressType": self.address_type,
            "status": "IN_USE" if self.users else "RESERVED", "region": region_url,
            "selfLink": f"{region_url}/addresses/{self.name}", "networkTier": "PREMIUM",
            "creationTimestamp": self.created.isoformat(timespec="milliseconds"),
            "labelFingerprint": self.label_fingerprint, "ipVersion": "IPV4"}
        if self.users:
            body["users"] = [f"{_BASE}/projects/{self.project}/{u}" for u in self.users]
        if self.labels:
            body["labels"] = dict(self.labels)
        return body


_P = r"/compute/v1/projects/(?P<project>[^/]+)"
_R = _P + r"/regions/(?P<region>[^/]+)"
ADDRESS_ROUTES: tuple[tuple[str, str, str], ...] = (
    (_P + r"/aggregated/addresses$", "GET", "address_aggregated_list"),
    (_R + r"/addresses/(?P<name>[^/]+)$", "GET", "address_get"),
    (_R + r"/addresses/(?P<name>[^/]+)$", "DELETE", "address_delete"),
    (_R + r"/addresses/(?P<name>[^/]+)/setLabels$", "POST", "address_set_labels"),
    (_R + r"/operations/(?P<op>[^/]+)$", "GET", "region_operation_get"),
    (_R + r"/operations/(?P<op>[^/]+)/wait$", "POST", "region_operation_wait"),
)


class AddressOps:
    """The addresses of FakeCompute (under its lock, with its operations)."""

    _lock: threading.RLock
    unreachable_zones: set[str]

    def _init_addresses(self) -> None:
        self._addresses: dict[tuple[str, str, str], FakeAddress] = {}

    def _complete_due_operations(self) -> None:
        raise NotImplementedError  # FakeCompute's

    def add_address(self, project: str, region: str, name: str, address: str,
                    **kwargs: Any) -> FakeAddress:
        with self._lock:
            a = FakeAddress(project=project, region=region, name=name, address=address,
                            **kwargs)
            self._addresses[(project, region, name)] = a
            return a

    def address(self, project: str, region: str, name: str) -> FakeAddress | None:
        with self._lock:
            return self._addresses.get((project, region, name))

    def _address_aggregated_list(self, project: str, query: dict[str, str], body: Any
                                 ) -> tuple[int, Any]:
        with self._lock:
            listed = [(a.region, a.to_json()) for a in sorted(
                (a for a in self._addresses.values() if a.project == project),
                key=lambda a: (a.region, a.name))]
        status, out = aggregated(listed, query, kind="compute#addressAggregatedList",
                                 key="addresses")
        if status == 200:  # an address's scope is its region, not a zone
            out["items"] = {k.replace("zones/", "regions/", 1): v
                            for k, v in out["items"].items()}
        return status, out

    def _found(self, project: str, region: str, name: str) -> FakeAddress | tuple[int, Any]:
        a = self._addresses.get((project, region, name))
        if a is None:
            return 404, error(404, f"The resource 'projects/{project}/regions/{region}/"
                                   f"addresses/{name}' was not found", reason="notFound")
        return a

    def _address_get(self, project: str, region: str, name: str, query: dict[str, str],
                     body: Any) -> tuple[int, Any]:
        with self._lock:
            a = self._found(project, region, name)
            return a if isinstance(a, tuple) else (200, a.to_json())

    def _region_op(self, a: FakeAddress, kind: str, query: dict[str, str], apply: Any
                   ) -> tuple[int, Any]:
        return self._start_op(a.project, a.region, kind, a, apply, query,
                              target_path="addresses", scope="regions")

    def _start_op(self, project: str, where: str, kind: str, target: Any, apply: Any,
                  query: dict[str, str], *, target_path: str, scope: str = "zones"
                  ) -> tuple[int, Any]:
        raise NotImplementedError  # FakeCompute's

    def _address_delete(self, project: str, region: str, name: str, query: dict[str, str],
                        body: Any) -> tuple[int, Any]:
        with self._lock:
            a = self._found(project, region, name)
            if isinstance(a, tuple):
                return a
            if a.users:
                return 400, error(400, f"The address resource 'projects/{project}/regions/"
                                       f"{region}/addresses/{name}' is already being used by "
                                       f"'{a.users[0]}'",
                                  reason="resourceInUseByAnotherResource")
            return self._region_op(a, "delete", query, lambda target: self._addresses.pop(
                (target.project, target.region, target.name), None))

    def _address_set_labels(self, project: str, region: str, name: str,
                            query: dict[str, str], body: Any) -> tuple[int, Any]:
        with self._lock:
            a = self._found(project, region, name)
            if isinstance(a, tuple):
                return a
            if body.get("labelFingerprint") != a.label_fingerprint:
                return 412, error(412, "Labels fingerprint either invalid or resource labels "
                                       "have changed", reason="conditionNotMet")
            labels = dict(body.get("labels") or {})
            return self._region_op(a, "setLabels", query,
                                   lambda target: setattr(target, "labels", labels))

    # region operations live beside the zones' (keyed by project, region, name)
    def _region_operation_get(self, project: str, region: str, op: str,
                              query: dict[str, str], body: Any) -> tuple[int, Any]:
        return self._operation_get(project, region, op, query, body)

    def _region_operation_wait(self, project: str, region: str, op: str,
                               query: dict[str, str], body: Any) -> tuple[int, Any]:
        return self._operation_wait(project, region, op, query, body)

    def _operation_get(self, project: str, zone: str, op: str, query: dict[str, str],
                       body: Any) -> tuple[int, Any]:
        raise NotImplementedError  # FakeCompute's

    def _operation_wait(self, project: str, zone: str, op: str, query: dict[str, str],
                        body: Any) -> tuple[int, Any]:
        raise NotImplementedError  # FakeCompute's
