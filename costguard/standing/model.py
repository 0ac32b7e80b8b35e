"""A resource that bills while nothing runs (a volume, a snapshot, an address), as costguard
sees it, and the protocol of the providers that hold them."""

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


class Standing(Frozen):
    """One volume, snapshot or address. `used_by` names what holds it (the instances a
    volume is attached to, the images, launch templates and volumes that need a snapshot,
    the instance or interface an address is associated with); `in_use` is True while
    something *running* uses it. A volume attached only to stopped instances is not in use
    but still attached: it may be reported, never deleted."""

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
        price_source=row.price_source, tags=dict(row.tags), observed_at=row.last_seen)
