"""The GCP provider's standing resources (standing.model.HoldsStanding): zonal disks,
snapshots, static external addresses and reservations, each kind's calls in its own module
(gcp/volumes.py, snapshots.py, addresses.py, reservations.py). Mixed into GcpProvider, whose
settings, clients, clock, retry, projects and disks client it uses; the clients of these
kinds are made when first needed and closed with the provider.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.api_core import retry as gretry

from costguard.clock import Clock
from costguard.errors import ProviderError
from costguard.model import ActionResult, Gap
from costguard.providers.gcp import addresses, volumes
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp import reservations as gcp_reservations
from costguard.providers.gcp import snapshots as gcp_snapshots
from costguard.providers.gcp.clients import GcpClients
from costguard.providers.gcp.settings import GcpSettings
from costguard.standing.model import Standing, StandingKind, StandingList


class GcpStandingOps:
    """GcpProvider's standing resources."""

    settings: GcpSettings
    clients: GcpClients
    clock: Clock
    retry: gretry.Retry
    projects: Callable[[], tuple[list[str], list[Gap]]]
    _disk_client: Callable[[], compute_v1.DisksClient]

    def close_standing(self) -> None:
        """Close the clients the standing kinds made (none made, none closed)."""
        reserved = getattr(self, "_reservation_client", None)
        if reserved is not None:
            reserved.transport.close()
        snaps = getattr(self, "_snapshot_clients", None)
        if snaps is not None:
            snaps.close()
        for client in getattr(self, "_address_clients", None) or ():
            client.transport.close()

    def standing_kinds(self) -> frozenset[StandingKind]:
        return frozenset(StandingKind)

    def _reservations(self) -> Any:
        if getattr(self, "_reservation_client", None) is None:
            self._reservation_client = gcp_reservations.client(
                self.clients.credentials, self.settings.compute_endpoint)
        return self._reservation_client

    def _addresses(self) -> tuple[Any, Any]:
        if getattr(self, "_address_clients", None) is None:
            self._address_clients = addresses.clients(self.clients.credentials,
                                                      self.settings.compute_endpoint)
        return self._address_clients

    def _snapshots(self) -> gcp_snapshots.Clients:
        if getattr(self, "_snapshot_clients", None) is None:
            self._snapshot_clients = gcp_snapshots.Clients(
                self.clients.credentials, self.settings.compute_endpoint, self._disk_client())
        return self._snapshot_clients

    def list_standing(self, kinds: frozenset[StandingKind]) -> StandingList:
        """Every zonal disk (gcp/volumes.py), snapshot (gcp/snapshots.py), external address
        (gcp/addresses.py) and billing reservation (gcp/reservations.py) of every project,
        as `kinds` asks."""
        names, gaps = self.projects()
        out = StandingList(gaps=list(gaps))
        if not names:
            return out
        observed_at = self.clock.now()
        # clients made once, before the threads share them
        reserved = self._reservations() if StandingKind.RESERVATION in kinds else None
        disks = self._disk_client() if StandingKind.VOLUME in kinds else None
        ips = self._addresses()[0] if StandingKind.ADDRESS in kinds else None
        snaps = self._snapshots() if StandingKind.SNAPSHOT in kinds else None

        def read(project: str) -> StandingList:
            found = StandingList()
            for part in (
                    volumes.list_project(disks, project, retry=self.retry,
                                         observed_at=observed_at) if disks else None,
                    addresses.list_project(ips, project, retry=self.retry,
                                           observed_at=observed_at) if ips else None,
                    gcp_snapshots.list_project(snaps, project, retry=self.retry,
                                               observed_at=observed_at) if snaps else None,
                    gcp_reservations.list_project(reserved, self.clients.instances, project,
                                                  retry=self.retry, observed_at=observed_at)
                    if reserved is not None else None):
                if part is not None:
                    found.items.extend(part.items)
                    found.gaps.extend(part.gaps)
            return found

        with ThreadPoolExecutor(max_workers=min(self.settings.max_workers, len(names))) as pool:
            for found in pool.map(read, names):
                out.items.extend(found.items)
                out.gaps.extend(found.gaps)
        return out

    def describe_standing(self, item: Standing) -> Standing | None:
        if item.kind is StandingKind.VOLUME:
            return volumes.describe(self._disk_client(), item, retry=self.retry,
                                    observed_at=self.clock.now())
        if item.kind is StandingKind.ADDRESS:
            return addresses.describe(self._addresses()[0], item, retry=self.retry,
                                      observed_at=self.clock.now())
        if item.kind is StandingKind.SNAPSHOT:
            return gcp_snapshots.describe(self._snapshots(), item, retry=self.retry,
                                          observed_at=self.clock.now())
        return gcp_reservations.describe(self._reservations(), self.clients.instances, item,
                                         retry=self.retry, observed_at=self.clock.now())

    def _acts_on(self, item: Standing, *kinds: StandingKind) -> None:
        if item.kind not in kinds:  # the registry gives the others no such action
            raise ProviderError("gcp", item.resource_id,
                                f"costguard does not do that to a GCP {item.kind}")

    def snapshot_volume(self, item: Standing, *, dry_run: bool) -> tuple[str, str]:
        self._acts_on(item, StandingKind.VOLUME)
        return volumes.snapshot(self._disk_client(), self._snapshots().snapshots, item,
                                retry=self.retry, dry_run=dry_run)

    def delete_standing(self, item: Standing, *, dry_run: bool) -> ActionResult:
        self._acts_on(item, StandingKind.VOLUME, StandingKind.ADDRESS, StandingKind.SNAPSHOT)
        timeout = self.settings.operation_timeout_s
        if item.kind is StandingKind.ADDRESS:
            return addresses.delete(*self._addresses(), item, retry=self.retry,
                                    timeout_s=timeout, dry_run=dry_run)
        if item.kind is StandingKind.SNAPSHOT:
            return gcp_snapshots.delete(self._snapshots(), item, retry=self.retry,
                                        timeout_s=timeout, dry_run=dry_run)
        return volumes.delete(self._disk_client(), self.clients.zone_operations, item,
                              retry=self.retry, timeout_s=timeout, dry_run=dry_run)

    def tag_standing(self, item: Standing, tags: dict[str, str], *, dry_run: bool
                     ) -> ActionResult:
        self._acts_on(item, StandingKind.VOLUME, StandingKind.ADDRESS, StandingKind.SNAPSHOT)
        timeout = self.settings.operation_timeout_s
        if item.kind is StandingKind.ADDRESS:
            return addresses.label(*self._addresses(), item, tags, retry=self.retry,
                                   timeout_s=timeout, dry_run=dry_run)
        if item.kind is StandingKind.SNAPSHOT:
            return gcp_snapshots.label(self._snapshots(), item, tags, retry=self.retry,
                                       timeout_s=timeout, dry_run=dry_run)
        return volumes.label(self._disk_client(), self.clients.zone_operations, item, tags,
                             retry=self.retry, timeout_s=timeout, dry_run=dry_run)

