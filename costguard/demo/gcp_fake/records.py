"""The Compute fake's records: a VM (and its REST JSON) and a zone operation."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from costguard.demo.gcp_fake.disks import FakeDisk, fingerprint

_BASE = "https://www.googleapis.com/compute/v1"


@dataclass
class FakeVm:
    project: str
    zone: str
    name: str
    id: int
    machine_type: str
    status: str = "RUNNING"
    labels: dict[str, str] = field(default_factory=dict)
    accelerators: list[tuple[str, int]] = field(default_factory=list)
    provisioning_model: str = "STANDARD"
    preemptible: bool = False
    created: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    # when it last started (`lastStartTimestamp`, kept while it is stopped); None: at
    # `created` if it runs, never if it was created stopped
    last_start: datetime | None = None
    label_version: int = 0
    disks: list[FakeDisk] = field(default_factory=list)
    service_account: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)  # e.g. created-by (a MIG's VM)
    # reservationAffinity.consumeReservationType (the API's default: ANY_RESERVATION) and,
    # for SPECIFIC_RESERVATION, the reservation names it targets
    reservation_affinity: str = "ANY_RESERVATION"
    reservation_names: tuple[str, ...] = ()

    @property
    def label_fingerprint(self) -> str:
        # like GCE's, a hash of the labels: two VMs with the same labels share a fingerprint
        # (so a VM recreated under the same name does not answer a stale read with a 412)
        return fingerprint(self.labels)

    def to_json(self) -> dict[str, Any]:
        zone_url = f"{_BASE}/projects/{self.project}/zones/{self.zone}"
        body: dict[str, Any] = {
            "kind": "compute#instance",
            "id": str(self.id),
            "name": self.name,
            "creationTimestamp": self.created.isoformat(timespec="milliseconds"),
            "machineType": f"{zone_url}/machineTypes/{self.machine_type}",
            "zone": zone_url,
            "status": self.status,
            "labels": dict(self.labels),
            "labelFingerprint": self.label_fingerprint,
            "selfLink": f"{zone_url}/instances/{self.name}",
            "scheduling": {
                "provisioningModel": self.provisioning_model,
                "preemptible": self.preemptible,
                "automaticRestart": not self.preemptible,
            },
        }
        body["disks"] = [d.attached_json(self.project, self.zone, i)
                         for i, d in enumerate(self.disks)]
        # what a real VM's listing carries besides (the Instance resource's fields, as
        # `instances.get` returns them): costguard reads none of it, but parses it unless it
        # asks for a partial response
        region = self.zone.rsplit("-", 1)[0]
        net = f"{_BASE}/projects/{self.project}"
        body["networkInterfaces"] = [{
            "kind": "compute#networkInterface", "name": "nic0",
            "network": f"{net}/global/networks/default",
            "subnetwork": f"{net}/regions/{region}/subnetworks/default",
            "networkIP": f"10.{self.id % 250}.{self.id // 250 % 250}.{self.id % 7 + 2}",
            "fingerprint": "tGm1Oa9ALNI=", "stackType": "IPV4_ONLY",
            "accessConfigs": [{"kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT",
                               "name": "External NAT", "networkTier": "PREMIUM"}]}]
        body["metadata"] = {"kind": "compute#metadata", "fingerprint": "fake"}
        if self.metadata:
            body["metadata"]["items"] = [{"key": k, "value": v}
                                         for k, v in self.metadata.items()]
        body["scheduling"]["onHostMaintenance"] = "TERMINATE" if self.accelerators else "MIGRATE"
        body.update({
            "tags": {"fingerprint": "42WmSpB8rSM="}, "cpuPlatform": "Intel Cascade Lake",
            "fingerprint": "nDSkMe6qkGM=", "canIpForward": False, "deletionProtection": False,
            "startRestricted": False, "description": "",
            "shieldedInstanceConfig": {"enableSecureBoot": False, "enableVtpm": True,
                                       "enableIntegrityMonitoring": True},
            "shieldedInstanceIntegrityPolicy": {"updateAutoLearnPolicy": True},
            "confidentialInstanceConfig": {"enableConfidentialCompute": False},
            "reservationAffinity": {"consumeReservationType": self.reservation_affinity, **(
                {"key": "compute.googleapis.com/reservation-name",
                 "values": list(self.reservation_names)} if self.reservation_names else {})},
            "displayDevice": {"enableDisplay": False},
            "keyRevocationActionType": "NONE", "satisfiesPzi": True,
        })
        started = self.last_start or (self.created if self.status == "RUNNING" else None)
        if started is not None:
            body["lastStartTimestamp"] = started.isoformat(timespec="milliseconds")
        if self.service_account:
            body["serviceAccounts"] = [{"email": self.service_account,
                                        "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}]
        if self.accelerators:
            body["guestAccelerators"] = [
                {"acceleratorType": f"{zone_url}/acceleratorTypes/{t}", "acceleratorCount": n}
                for t, n in self.accelerators
            ]
        return body


@dataclass
class FakeOperation:
    project: str
    zone: str
    name: str
    kind: str  # "stop", "start", "setLabels"
    target: Any  # a FakeVm, or a FakeDisk (`target_path` "disks")
    done_at: float
    apply: Any  # callable run once when the operation completes
    done: bool = False
    # the (code, message) errors it completes with (`failing_operations`)
    errors: tuple[tuple[str, str], ...] = ()
    target_path: str = "instances"  # the collection of the target's targetLink
    # "regions": `zone` holds the region (an address's operation); "global": no zone
    scope: str = "zones"

    def to_json(self) -> dict[str, Any]:
        zone_url = (f"{_BASE}/projects/{self.project}/global" if self.scope == "global"
                    else f"{_BASE}/projects/{self.project}/{self.scope}/{self.zone}")
        out: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(abs(hash(self.name)) % 10**18),
            "name": self.name,
            "operationType": self.kind,
            **({"zone" if self.scope == "zones" else "region": zone_url}
               if self.scope != "global" else {}),
            "targetLink": f"{zone_url}/{self.target_path}/{self.target.name}",
            "targetId": str(self.target.id),
            "status": "DONE" if self.done else "RUNNING",
            "progress": 100 if self.done else 0,
            "selfLink": f"{zone_url}/operations/{self.name}",
        }
        if self.done and self.errors:
            out["error"] = {"errors": [{"code": c, "message": m} for c, m in self.errors]}
        return out
