"""A tiny scripted cloud for engine tests: each instance's GPU phase is a function of time.

It implements the Provider protocol honestly (state changes, dry-run, skip when changed) and
counts every call, so tests can prove an action happened exactly once. The optional
capabilities `describe` (the re-check before an action), `terminate` and `stopped_cost` are
off unless a test switches them on (`full_cloud` has all three), so the engine is tested
both with and without them.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from costguard.clock import Clock
from costguard.model import (
    AT_MINIMUM,
    ActionOutcome,
    ActionResult,
    GpuMinute,
    Instance,
    InstanceKind,
    InstanceState,
    Inventory,
    Lifecycle,
    Owner,
    PriceQuote,
    ProviderName,
)
from costguard.telemetry.summary import sim_minute

Phase = Callable[[datetime], str | None]  # minute -> "busy"/"held_memory_idle"/... or None

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)  # a Monday
OWNER_TAGS: Mapping[str, str] = {"team": "research", "owner": "ana@example.com"}
PRICE = 4.0  # full_cloud: on-demand USD/h of every instance
SPOT_PRICE = 1.5
STOPPED_PRICE = 0.02  # full_cloud: a stopped instance's disk


def always(phase: str | None) -> Phase:
    return lambda minute: phase


def until(when: datetime, before: str | None, after: str | None) -> Phase:
    return lambda minute: before if minute < when else after


IDLE = always("no_process")  # no process on the GPU, SMs at 0 %
BUSY = always("busy")
DARK = always(None)  # no telemetry at all


class ScriptedCloud:
    name: ProviderName = "sim"

    def __init__(self, clock: Clock, usd_per_hour: float = 3.6, *,
                 spot_usd_per_hour: float | None = None,
                 stopped_usd_per_hour: float | None = None,
                 can_describe: bool = False, can_terminate: bool = False,
                 provider: ProviderName = "sim") -> None:
        self.name = provider  # the provider its instances name
        self.clock = clock
        self.usd_per_hour = usd_per_hour
        self.spot_usd_per_hour = spot_usd_per_hour  # None: spot costs the on-demand price
        self.stopped_usd_per_hour = stopped_usd_per_hour  # None: no stopped_cost capability
        self.can_describe = can_describe
        self.can_terminate = can_terminate
        self.instances: dict[str, Instance] = {}
        self.phases: dict[str, Phase] = {}
        self.calls: Counter[str] = Counter()
        self.rng = random.Random(1)
        self.acted_on: list[tuple[str, str]] = []  # (verb, instance id) of every non-dry call
        self.groups: dict[str, list[int]] = {}  # group name -> [desired, min]

    def add(self, iid: str, phase: Phase = IDLE, *, gpus: int = 1,
            tags: Mapping[str, str] | None = None, lifecycle: Lifecycle = Lifecycle.ON_DEMAND,
            itype: str = "g5.xlarge", launched: datetime | None = None,
            owner: Owner | None = None, kind: InstanceKind = InstanceKind.INSTANCE) -> Instance:
        """A running instance (of `kind`: a notebook's is one too); `tags` replace the
        default owner and team tags. An `owner` of a scalable kind joins that group
        (`add_group`), which `scale_in` shrinks."""
        inst = Instance(
            provider=self.name, account="111111111111", region="us-east-1", zone="us-east-1a",
            instance_id=iid, name=iid, instance_type=itype, state=InstanceState.RUNNING,
            lifecycle=lifecycle, gpu_count=gpus, gpu_model="A10G" if gpus else None,
            launch_time=launched or T0 - timedelta(days=1),
            tags=dict(OWNER_TAGS if tags is None else tags), observed_at=self.clock.now(),
            owner=owner, kind=kind)
        self.instances[iid] = inst
        self.phases[iid] = phase
        return inst

    def add_group(self, name: str, *, desired: int, min_size: int) -> None:
        self.groups[name] = [desired, min_size]

    def _sized(self, inst: Instance) -> Instance:
        owner = inst.owner
        if owner is None or owner.name not in self.groups:
            return inst
        desired, low = self.groups[owner.name]
        return inst.model_copy(update={"owner": owner.model_copy(
            update={"desired": desired, "min_size": low})})

    def scale_in(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        self.calls["scale_in-dry" if dry_run else "scale_in"] += 1
        live = self.instances[instance.instance_id]
        group = self.groups.get(live.owner.name) if live.owner else None
        if group is None or live.state is not InstanceState.RUNNING:
            return ActionResult(outcome=ActionOutcome.SKIPPED, detail="not a running member")
        if group[0] - 1 < group[1]:
            return ActionResult(outcome=ActionOutcome.SKIPPED,
                                detail=f"{AT_MINIMUM} (desired {group[0]}, min {group[1]})")
        if dry_run:
            return ActionResult(outcome=ActionOutcome.DRY_RUN)
        self.acted_on.append(("scale_in", instance.instance_id))
        group[0] -= 1
        self.set(instance.instance_id, state=InstanceState.TERMINATED)
        return ActionResult(outcome=ActionOutcome.DONE, state_after=InstanceState.TERMINATED)

    def set(self, iid: str, **update: object) -> None:
        """Change an instance behind costguard's back (state, tags, ...)."""
        self.instances[iid] = self.instances[iid].model_copy(update=update)

    def restart(self, iid: str) -> None:
        """The owner starts it again (outside costguard)."""
        self.set(iid, state=InstanceState.RUNNING)

    # -- Provider protocol -------------------------------------------------------------
    def list_instances(self) -> Inventory:
        self.calls["list"] += 1
        now = self.clock.now()
        return Inventory(instances=[self._sized(i).model_copy(update={"observed_at": now})
                                    for i in self.instances.values()])

    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        out: list[GpuMinute] = []
        minute = start.replace(second=0, microsecond=0)
        minute += timedelta(minutes=1) if minute < start else timedelta(0)
        while minute < end:
            for inst in instances:
                live = self.instances[inst.instance_id]
                phase = self.phases[inst.instance_id](minute)
                if phase is None or live.state is not InstanceState.RUNNING:
                    continue
                for gpu in range(live.gpu_count):
                    out.append(sim_minute(phase, self.name, inst.instance_id, gpu, minute,
                                          self.rng))
            minute += timedelta(minutes=1)
        return out

    def _move(self, inst: Instance, frm: InstanceState, to: InstanceState, verb: str,
              dry_run: bool) -> ActionResult:
        self.calls[f"{verb}{'-dry' if dry_run else ''}"] += 1
        live = self.instances[inst.instance_id]
        if live.state is not frm:
            return ActionResult(outcome=ActionOutcome.SKIPPED, detail=f"is {live.state}",
                                state_after=live.state)
        if dry_run:
            return ActionResult(outcome=ActionOutcome.DRY_RUN, detail="permission verified")
        self.acted_on.append((verb, inst.instance_id))
        self.set(inst.instance_id, state=to)
        return ActionResult(outcome=ActionOutcome.DONE, state_after=to)

    def stop(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        return self._move(instance, InstanceState.RUNNING, InstanceState.STOPPED, "stop",
                          dry_run)

    def start(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        return self._move(instance, InstanceState.STOPPED, InstanceState.RUNNING, "start",
                          dry_run)

    def set_tags(self, instance: Instance, tags: Mapping[str, str], *,
                 remove: Sequence[str] = (), dry_run: bool) -> ActionResult:
        self.calls["tags-dry" if dry_run else "tags"] += 1
        if dry_run:
            return ActionResult(outcome=ActionOutcome.DRY_RUN)
        live = self.instances[instance.instance_id]
        self.set(instance.instance_id,
                 tags={k: v for k, v in live.tags.items() if k not in remove} | dict(tags))
        return ActionResult(outcome=ActionOutcome.DONE)

    def price(self, instance: Instance) -> PriceQuote | None:
        spot = instance.lifecycle is Lifecycle.SPOT and self.spot_usd_per_hour is not None
        return PriceQuote(usd_per_hour=self.spot_usd_per_hour if spot else self.usd_per_hour,
                          source="test price")

    # -- optional capabilities ---------------------------------------------------------
    def __getattr__(self, name: str) -> object:
        # only called for attributes not found: the capabilities exist while switched on
        # (costguard looks them up with getattr)
        switches = self.__dict__
        if name == "describe" and switches.get("can_describe"):
            return self._describe
        if name == "terminate" and switches.get("can_terminate"):
            return self._terminate
        if name == "stopped_cost" and switches.get("stopped_usd_per_hour") is not None:
            return self._stopped_cost
        raise AttributeError(name)

    def _describe(self, instance: Instance) -> Instance | None:
        self.calls["describe"] += 1
        found = self.instances.get(instance.instance_id)
        return self._sized(found) if found is not None else None

    def _terminate(self, instance: Instance, *, snapshot: bool, dry_run: bool) -> ActionResult:
        return self._move(instance, InstanceState.STOPPED, InstanceState.TERMINATED,
                          "terminate", dry_run)

    def _stopped_cost(self, instance: Instance) -> PriceQuote:
        assert self.stopped_usd_per_hour is not None
        return PriceQuote(usd_per_hour=self.stopped_usd_per_hour, source="100 GiB disk")


def full_cloud(clock: Clock) -> ScriptedCloud:
    """The scripted cloud with every optional capability: $4/h on demand, $1.50/h spot,
    $0.02/h while stopped."""
    return ScriptedCloud(clock, PRICE, spot_usd_per_hour=SPOT_PRICE,
                         stopped_usd_per_hour=STOPPED_PRICE, can_describe=True,
                         can_terminate=True)


class BatchCloud(ScriptedCloud):
    """ScriptedCloud plus the batch capabilities; `calls` counts batch calls, not instances."""

    def describe_many(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
        self.calls["describe_many"] += 1
        return {i.instance_id: self.instances.get(i.instance_id) for i in instances}

    def stop_many(self, instances: Sequence[Instance], *, dry_run: bool
                  ) -> dict[str, ActionResult]:
        self.calls["stop_many"] += 1
        return {i.instance_id: self.stop(i, dry_run=dry_run) for i in instances}

    def set_tags_many(self, instances: Sequence[Instance], tags: Mapping[str, str], *,
                      remove: Sequence[str] = (), dry_run: bool) -> dict[str, ActionResult]:
        self.calls["tags_many"] += 1
        return {i.instance_id: self.set_tags(i, tags, remove=remove, dry_run=dry_run)
                for i in instances}
