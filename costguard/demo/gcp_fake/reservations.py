"""Compute Engine reservations for the Compute fake (`FakeCompute` mixes it in).

Implemented: `reservations.aggregatedList` (pages, the regex `filter`, unreachable zones,
like instances) and `reservations.get` (404 for a name that is not there). A reservation's
JSON carries the fields of the API reference's `Reservation` resource that a listing
returns: `specificReservation` (`instanceProperties` with `machineType` as a name and
`guestAccelerators`, `count`, `inUseCount`, `assuredCount`: int64 as JSON strings),
`specificReservationRequired`, `status`, `shareSettings`, `commitment` and `deleteAtTime`
where set. Tests change `in_use` to say how many VMs run in one (the fake does not place VMs
in reservations).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from costguard.demo.gcp_fake.filter import aggregated
from costguard.demo.gcp_fake.http import error

_BASE = "https://www.googleapis.com/compute/v1"
_ID_START = 7_300_000_000_000_000_000


@dataclass
class FakeReservation:
    project: str
    zone: str
    name: str
    id: int
    machine_type: str
    count: int
    in_use: int = 0
    accelerators: list[tuple[str, int]] = field(default_factory=list)
    specific_required: bool = False
    status: str = "READY"
    created: datetime = field(default_factory=lambda: datetime(2026, 11, 1, tzinfo=UTC))
    commitment: str | None = None
    delete_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        zone_url = f"{_BASE}/projects/{self.project}/zones/{self.zone}"
        props: dict[str, Any] = {"machineType": self.machine_type}
        if self.accelerators:
            props["guestAccelerators"] = [{"acceleratorType": t, "acceleratorCount": n}
                                          for t, n in self.accelerators]
        body: dict[str, Any] = {
            "kind": "compute#reservation", "id": str(self.id),
            "creationTimestamp": self.created.isoformat(timespec="milliseconds"),
            "selfLink": f"{zone_url}/reservations/{self.name}", "zone": zone_url,
            "name": self.name, "description": "",
            "specificReservation": {"instanceProperties": props, "count": str(self.count),
                                    "inUseCount": str(self.in_use),
                                    "assuredCount": str(self.count)},
            "specificReservationRequired": self.specific_required, "status": self.status,
            "shareSettings": {"shareType": "LOCAL"}, "satisfiesPzs": False,
        }
        if self.commitment:
            body["commitment"] = (f"{_BASE}/projects/{self.project}/regions/"
                                  f"{self.zone.rsplit('-', 1)[0]}/commitments/{self.commitment}")
        if self.delete_at:
            body["deleteAtTime"] = self.delete_at.isoformat(timespec="milliseconds")
        return body


_P = r"/compute/v1/projects/(?P<project>[^/]+)"
RESERVATION_ROUTES: tuple[tuple[str, str, str], ...] = (
    (_P + r"/aggregated/reservations$", "GET", "reservation_aggregated_list"),
    (_P + r"/zones/(?P<zone>[^/]+)/reservations/(?P<name>[^/]+)$", "GET", "reservation_get"),
)


class ReservationOps:
    """The reservations of FakeCompute (under its lock)."""

    _lock: threading.RLock
    unreachable_zones: set[str]

    def _init_reservations(self) -> None:
        self._reservations: dict[tuple[str, str, str], FakeReservation] = {}
        self._reservation_ids = itertools.count(_ID_START)

    def add_reservation(self, project: str, zone: str, name: str, machine_type: str,
                        count: int, **kwargs: Any) -> FakeReservation:
        with self._lock:
            r = FakeReservation(project=project, zone=zone, name=name,
                                id=next(self._reservation_ids), machine_type=machine_type,
                                count=count, **kwargs)
            self._reservations[(project, zone, name)] = r
            return r

    def reservation(self, project: str, zone: str, name: str) -> FakeReservation:
        with self._lock:
            return self._reservations[(project, zone, name)]

    def remove_reservation(self, project: str, zone: str, name: str) -> None:
        with self._lock:
            del self._reservations[(project, zone, name)]

    def _reservation_aggregated_list(self, project: str, query: dict[str, str],
                                     body: Any) -> tuple[int, Any]:
        with self._lock:
            listed = [(r.zone, r.to_json()) for r in sorted(
                (r for r in self._reservations.values() if r.project == project),
                key=lambda r: (r.zone, r.name))]
        return aggregated(listed, query, kind="compute#reservationAggregatedList",
                          key="reservations", unreachable=self.unreachable_zones)

    def _reservation_get(self, project: str, zone: str, name: str, query: dict[str, str],
                         body: Any) -> tuple[int, Any]:
        with self._lock:
            r = self._reservations.get((project, zone, name))
            if r is None:
                return 404, error(404, f"The resource 'projects/{project}/zones/{zone}/"
                                       f"reservations/{name}' was not found", reason="notFound")
            return 200, r.to_json()
