"""The simulated cloud's volumes, snapshots and addresses (`SimSettings.standing`), priced
as EBS and Elastic IPs are (providers/aws/data/ebs_prices.json).

Beside the seeded fleet: a scratch volume attached to nothing for five weeks, a checkpoint
volume detached twelve days ago (younger than the example policy's 30 days), an old snapshot
nothing needs, a snapshot an image needs, and an address associated with nothing for three
weeks. Like a persistent disk, a simulated volume says when it was last detached. A snapshot
taken before a delete completes one listing later, as a real one takes a while. And a
targeted capacity reservation of four p4d.24xlarge, two of them running in it since it was
made a week ago (priced at the on-demand rate, as an unused ODCR slot bills); the running
on-demand p4d.24xlarge of its region are its twins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from costguard.clock import Clock
from costguard.model import (
    HOURS_PER_MONTH,
    ActionOutcome,
    ActionResult,
    Instance,
    InstanceState,
    Lifecycle,
)
from costguard.providers.aws.disks import SNAPSHOT_OF_TAG, ebs_table, volume_usd_per_month
from costguard.providers.aws.gpu_types import shipped_gpu_table
from costguard.providers.aws.pricing import OnDemandTable
from costguard.standing.model import Reserved, Standing, StandingKind, StandingList


def seeded(account: str, region: str, start: datetime) -> list[Standing]:
    table = ebs_table()
    day = timedelta(days=1)

    def volume(vid: str, size: int, vtype: str, made: timedelta, unused: timedelta,
               tags: dict[str, str]) -> Standing:
        return Standing(
            kind=StandingKind.VOLUME, provider="sim", account=account, region=region,
            zone=f"{region}a", resource_id=vid, name=tags.get("Name"), state="available",
            in_use=False, size_gb=size, detail=vtype, created_at=start - made,
            unused_since=start - unused,
            usd_per_month=volume_usd_per_month({"VolumeType": vtype, "Size": size}, table),
            price_source=f"EBS list price {table.as_of}", tags=tags, observed_at=start)

    def snapshot(sid: str, size: int, made: timedelta, used_by: tuple[str, ...],
                 tags: dict[str, str]) -> Standing:
        return Standing(
            kind=StandingKind.SNAPSHOT, provider="sim", account=account, region=region,
            resource_id=sid, name=tags.get("Name"), state="completed", in_use=bool(used_by),
            used_by=used_by, size_gb=size, detail="vol-sim-retired", created_at=start - made,
            usd_per_month=size * table.snapshot_gb_month["standard"],
            price_source=f"EBS snapshot standard tier {table.as_of}", tags=tags,
            observed_at=start)

    return [
        reservation(account, region, start),
        volume("vol-sim-scratch-01", 500, "gp3", 45 * day, 35 * day,
               {"Name": "llm-scratch", "team": "research", "owner": "ana@example.com"}),
        volume("vol-sim-ckpt-02", 1000, "gp3", 20 * day, 12 * day,
               {"Name": "ckpt-archive", "team": "vision", "owner": "li@example.com"}),
        snapshot("snap-sim-old-01", 800, 120 * day, (),
                 {"Name": "pre-migration", "team": "research"}),
        snapshot("snap-sim-ami-02", 100, 200 * day, ("image ami-sim-base",),
                 {"Name": "base-image", "team": "platform"}),
        Standing(kind=StandingKind.ADDRESS, provider="sim", account=account, region=region,
                 resource_id="eipalloc-sim-01", name="203.0.113.10", state="unassociated",
                 in_use=False, detail="203.0.113.10", created_at=start - 60 * day,
                 unused_since=start - 21 * day,
                 usd_per_month=table.public_ipv4_hour * HOURS_PER_MONTH,
                 price_source=f"public IPv4 list price {table.as_of}",
                 tags={"team": "vision", "owner": "li@example.com"}, observed_at=start),
    ]


RESERVED_TYPE = "p4d.24xlarge"


def reservation(account: str, region: str, start: datetime) -> Standing:
    """The seeded capacity reservation: 4 x p4d.24xlarge, 2 running, for 3 weeks more."""
    gpu = shipped_gpu_table()[RESERVED_TYPE]
    found = OnDemandTable().lookup("us-east-1", RESERVED_TYPE)
    reserved = Reserved(instance_type=RESERVED_TYPE, capacity=4, used=2,
                        accelerators=gpu.count, accelerator=gpu.model,
                        unit_usd_per_hour=found.usd_per_hour if found else None,
                        ends_at=start + timedelta(days=21), match="targeted")
    hourly = reserved.unused_usd_per_hour
    return Standing(
        kind=StandingKind.RESERVATION, provider="sim", account=account, region=region,
        zone=f"{region}a", resource_id="cr-sim-p4d-01", name="llm-train-capacity",
        state="active", in_use=False, detail=reserved.words(),
        created_at=start - timedelta(days=7), unused_since=None,
        usd_per_month=None if hourly is None else hourly * HOURS_PER_MONTH,
        price_source=f"{found.source}, simulated cloud" if found else "unpriced",
        tags={"team": "research", "owner": "ana@example.com"}, observed_at=start,
        reservation=reserved)


def with_twins(item: Standing, fleet: list[Instance]) -> Standing:
    """A reservation with its twins: the fleet's running on-demand instances of its type and
    region (the simulated cloud runs none inside its reservations)."""
    r = item.reservation
    if r is None or not r.unused:
        return item
    twins = tuple(sorted(i.instance_id for i in fleet
                         if i.instance_type == r.instance_type and i.region == item.region
                         and i.account == item.account and i.state is InstanceState.RUNNING
                         and i.lifecycle is Lifecycle.ON_DEMAND))
    return item.model_copy(update={"reservation": r.model_copy(update={"twins": twins})})


class SimStanding:
    """What the simulated cloud holds that bills while nothing runs; thread-safe."""

    def __init__(self, items: list[Standing], clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._items = {i.resource_id: i for i in items}
        self._serial = 0
        self.calls: dict[str, int] = {"list": 0, "describe": 0, "snapshot": 0, "delete": 0,
                                      "tag": 0}

    def kinds(self) -> frozenset[StandingKind]:
        return frozenset(StandingKind) if self._items else frozenset()

    def listing(self, kinds: frozenset[StandingKind]) -> StandingList:
        now = self.clock.now()
        with self._lock:
            self.calls["list"] += 1
            self._settle(now)
            return StandingList(items=[i.model_copy(update={"observed_at": now})
                                       for i in self._items.values() if i.kind in kinds])

    def _settle(self, now: datetime) -> None:
        for sid, item in list(self._items.items()):
            if item.state == "pending" and now - (item.created_at or now) >= timedelta(
                    minutes=10):
                self._items[sid] = item.model_copy(update={"state": "completed"})

    def describe(self, item: Standing) -> Standing | None:
        with self._lock:
            self.calls["describe"] += 1
            self._settle(self.clock.now())
            return self._items.get(item.resource_id)

    def snapshot(self, item: Standing, *, dry_run: bool) -> tuple[str, str]:
        now = self.clock.now()
        with self._lock:
            self.calls["snapshot"] += 1
            if dry_run:
                return "", "dry-run"
            self._settle(now)
            for snap in self._items.values():
                if snap.tags.get(SNAPSHOT_OF_TAG) == item.resource_id:
                    return snap.resource_id, snap.state
            self._serial += 1
            sid = f"snap-sim-cg-{self._serial:02d}"
            table = ebs_table()
            self._items[sid] = Standing(
                kind=StandingKind.SNAPSHOT, provider="sim", account=item.account,
                region=item.region, resource_id=sid, name=f"costguard: {item.resource_id}",
                state="pending", in_use=True,
                used_by=(f"kept by costguard: taken before deleting {item.resource_id}",),
                size_gb=item.size_gb, detail=item.resource_id, created_at=now,
                usd_per_month=(item.size_gb or 0) * table.snapshot_gb_month["standard"],
                price_source=f"EBS snapshot standard tier {table.as_of}",
                tags={**item.tags, SNAPSHOT_OF_TAG: item.resource_id}, observed_at=now)
            return sid, "pending"

    def delete(self, item: Standing, *, dry_run: bool) -> ActionResult:
        with self._lock:
            self.calls["delete"] += 1
            current = self._items.get(item.resource_id)
            if current is None:
                return ActionResult(outcome=ActionOutcome.SKIPPED, detail="gone meanwhile")
            if current.in_use or current.used_by:
                return ActionResult(outcome=ActionOutcome.FAILED,
                                    detail=f"{item.resource_id} is in use")  # as a cloud says
            verb = "released" if item.kind is StandingKind.ADDRESS else "deleted"
            if dry_run:
                return ActionResult(outcome=ActionOutcome.DRY_RUN, detail=f"would be {verb}")
            del self._items[item.resource_id]
            return ActionResult(outcome=ActionOutcome.DONE, detail=verb)

    def tag(self, item: Standing, tags: dict[str, str], *, dry_run: bool) -> ActionResult:
        with self._lock:
            self.calls["tag"] += 1
            current = self._items.get(item.resource_id)
            if current is None:
                return ActionResult(outcome=ActionOutcome.SKIPPED, detail="gone meanwhile")
            if dry_run:
                return ActionResult(outcome=ActionOutcome.DRY_RUN, detail="would be tagged")
            self._items[item.resource_id] = current.model_copy(
                update={"tags": {**current.tags, **tags}})
            return ActionResult(outcome=ActionOutcome.DONE, detail="tagged")


class SimStandingOps:
    """The simulated cloud's `standing.model.HoldsStanding`, for SimProvider to mix in."""

    standing: SimStanding
    fleet_now: Callable[[], list[Instance]]  # the simulated fleet as it is now

    def standing_kinds(self) -> frozenset[StandingKind]:
        return self.standing.kinds()

    def list_standing(self, kinds: frozenset[StandingKind]) -> StandingList:
        listed = self.standing.listing(kinds)
        fleet = self.fleet_now()
        return listed.model_copy(update={"items": [with_twins(i, fleet)
                                                   for i in listed.items]})

    def describe_standing(self, item: Standing) -> Standing | None:
        return self.standing.describe(item)

    def snapshot_volume(self, item: Standing, *, dry_run: bool) -> tuple[str, str]:
        return self.standing.snapshot(item, dry_run=dry_run)

    def delete_standing(self, item: Standing, *, dry_run: bool) -> ActionResult:
        return self.standing.delete(item, dry_run=dry_run)

    def tag_standing(self, item: Standing, tags: dict[str, str], *, dry_run: bool
                     ) -> ActionResult:
        return self.standing.tag(item, tags, dry_run=dry_run)
