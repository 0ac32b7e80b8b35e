"""A resource that bills while nothing runs (a volume, a snapshot, an address, a capacity
reservation), as costguard sees it, and the protocol of the providers that hold them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import Field

from costguard.model import HOURS_PER_MONTH, ActionResult, Frozen, Gap, Owner, ProviderName

if TYPE_CHECKING:
    from costguard.store.tables import StandingRow



class StandingKind(StrEnum):
    VOLUME = "volume"  # an EBS volume, a persistent disk
    SNAPSHOT = "snapshot"  # an EBS snapshot, a disk snapshot
    ADDRESS = "address"  # an Elastic IP, a reserved static address
    # an On-Demand Capacity Reservation or Capacity Block, a Compute Engine reservation:
    # capacity billed by the hour whether instances run in it or not
    RESERVATION = "reservation"


class Reserved(Frozen):
    """What a capacity reservation holds and how much of it runs. `capacity` instances of
    `instance_type` are paid for by the hour; `used` of them run in it. `twins` are the
    running on-demand instances of its shape (account, zone, type) outside it: each could
    run in the reservation instead of paying on-demand beside it."""

    instance_type: str
    capacity: int = Field(ge=0)
    used: int = Field(ge=0)
    accelerators: int = Field(default=0, ge=0)  # per instance
    accelerator: str | None = None  # its model ("H100", "TPU v5e"), where the catalog knows
    unit_usd_per_hour: float | None = Field(default=None, ge=0)  # one instance's rate
    ends_at: datetime | None = None  # None: until cancelled
    # "open": matching instances use it on their own; "targeted": only those that name it
    match: str = "open"
    block: bool = False  # an EC2 Capacity Block for ML: paid up front for its whole term
    twins: tuple[str, ...] = ()

    @property
    def unused(self) -> int:
        return max(self.capacity - self.used, 0)

    @property
    def unused_usd_per_hour(self) -> float | None:
        return None if self.unit_usd_per_hour is None else self.unused * self.unit_usd_per_hour

    def words(self) -> str:
        """`p4d.24xlarge x4, 2 running, open, until 2026-12-20` (a listing's detail)."""
        until = f"until {self.ends_at:%Y-%m-%d}" if self.ends_at else "until cancelled"
        what = "Capacity Block" if self.block else self.match
        return f"{self.instance_type} x{self.capacity}, {self.used} running, {what}, {until}"


class Standing(Frozen):
    """One volume, snapshot, address or reservation. `used_by` names what holds it (the
    instances a volume is attached to, the images, launch templates and volumes that need a
    snapshot, the instance or interface an address is associated with); `in_use` is True
    while something *running* uses it. A volume attached only to stopped instances is not in
    use but still attached: it may be reported, never deleted. A reservation is in use while
    all of its capacity runs; its `usd_per_month` is what its unused part costs."""

    kind: StandingKind
    provider: ProviderName
    account: str
    region: str
    zone: str | None = None
    resource_id: str
    name: str | None = None
    state: str  # the cloud's own word: available, in-use, completed, READY ...
    in_use: bool
    used_by: tuple[str, ...] = ()
    size_gb: int | None = Field(default=None, ge=0)
    detail: str = ""  # the volume type, the snapshot's source volume, the address
    created_at: datetime | None  # None: the cloud does not say (an Elastic IP)
    # since when it has been unused: as listed, the cloud's word where it gives one (a
    # disk's last detach); as stored, what costguard knows (standing/stage.py)
    unused_since: datetime | None = None
    usd_per_month: float | None = Field(default=None, ge=0)
    price_source: str = ""
    tags: dict[str, str] = Field(default_factory=dict)
    observed_at: datetime
    reservation: Reserved | None = None  # a reservation's capacity and use

    @property
    def attached(self) -> bool:
        return bool(self.used_by)

    @property
    def owner(self) -> Owner | None:
        """No controller owns a standing resource (attribution reads `owner`)."""
        return None

    @property
    def launched_by(self) -> str | None:
        return None

    @property
    def usd_per_hour(self) -> float:
        return (self.usd_per_month or 0.0) / HOURS_PER_MONTH

    @property
    def instance_id(self) -> str:
        """The key the journal, policy states and alerts file it under (as an instance's)."""
        return self.resource_id



class StandingList(Frozen):
    """What one listing found, and the scopes it could not read."""

    items: list[Standing] = Field(default_factory=list)
    gaps: list[Gap] = Field(default_factory=list)


@runtime_checkable
class HoldsStanding(Protocol):
    """A provider that lists and acts on standing resources."""

    def standing_kinds(self) -> frozenset[StandingKind]:
        """The kinds this provider lists."""
        ...

    def list_standing(self, kinds: frozenset[StandingKind]) -> StandingList:
        """Every resource of `kinds` in every scope the provider reads."""
        ...

    def describe_standing(self, item: Standing) -> Standing | None:
        """`item` as the cloud shows it now (None: gone)."""
        ...

    def snapshot_volume(self, item: Standing, *, dry_run: bool) -> tuple[str, str]:
        """Start (or find, when an earlier attempt started it) the snapshot costguard takes
        before deleting volume `item`: (snapshot id, its state: pending | completed |
        error). Idempotent: tagged `costguard:snapshot-of=<volume id>`."""
        ...

    def delete_standing(self, item: Standing, *, dry_run: bool) -> ActionResult:
        """Delete a volume or snapshot, release an address."""
        ...

    def tag_standing(self, item: Standing, tags: dict[str, str], *, dry_run: bool
                     ) -> ActionResult:
        ...


def from_row(row: StandingRow) -> Standing:
    """A stored resource (store/tables.py StandingRow) as a `Standing`."""
    return Standing(
        kind=StandingKind(row.kind), provider=row.provider,
        account=row.account, region=row.region, zone=row.zone, resource_id=row.resource_id,
        name=row.name, state=row.state, in_use=row.in_use, used_by=tuple(row.used_by),
        size_gb=row.size_gb, detail=row.detail, created_at=row.created_at,
        unused_since=row.unused_since, usd_per_month=row.usd_per_month,
        price_source=row.price_source, tags=dict(row.tags), observed_at=row.last_seen,
        reservation=Reserved.model_validate(row.reservation) if row.reservation else None)
