"""A tiny scripted cloud for engine tests: each instance's GPU phase is a function of time.

It implements the Provider protocol honestly (state changes, dry-run, skip when changed) and
counts every mutating call, so tests can prove an action happened exactly once.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from costguard.clock import Clock
from costguard.model import (
    ActionOutcome,
    ActionResult,
    GpuMinute,
    Instance,
    InstanceState,
    Inventory,
    Lifecycle,
    PriceQuote,
    ProviderName,
)
from costguard.telemetry.summary import sim_minute

Phase = Callable[[datetime], str | None]  # minute -> "busy"/"held_memory_idle"/... or None

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)  # a Monday


def always(phase: str | None) -> Phase:
    return lambda minute: phase


def until(when: datetime, before: str | None, after: str | None) -> Phase:
    return lambda minute: before if minute < when else after


class ScriptedCloud:
    name: ProviderName = "sim"

    def __init__(self, clock: Clock, usd_per_hour: float = 3.6) -> None:
        self.clock = clock
        self.usd_per_hour = usd_per_hour
        self.instances: dict[str, Instance] = {}
        self.phases: dict[str, Phase] = {}
        self.calls: Counter[str] = Counter()
        self.rng = random.Random(1)

    def add(self, iid: str, phase: Phase, *, gpus: int = 1, tags: Mapping[str, str] | None = None,
            lifecycle: Lifecycle = Lifecycle.ON_DEMAND, itype: str = "g5.xlarge",
            launched: datetime | None = None) -> Instance:
        inst = Instance(
            provider="sim", account="111111111111", region="us-east-1", zone="us-east-1a",
            instance_id=iid, name=iid, instance_type=itype, state=InstanceState.RUNNING,
            lifecycle=lifecycle, gpu_count=gpus, gpu_model="A10G" if gpus else None,
            launch_time=launched or T0 - timedelta(days=1),
            tags=dict(tags or {"team": "research", "owner": "ana@example.com"}),
            observed_at=self.clock.now())
        self.instances[iid] = inst
        self.phases[iid] = phase
        return inst

    def list_instances(self) -> Inventory:
        self.calls["list"] += 1
        now = self.clock.now()
        return Inventory(instances=[i.model_copy(update={"observed_at": now})
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
                    out.append(sim_minute(phase, "sim", inst.instance_id, gpu, minute, self.rng))
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
        self.instances[inst.instance_id] = live.model_copy(update={"state": to})
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
        new = {k: v for k, v in live.tags.items() if k not in remove} | dict(tags)
        self.instances[instance.instance_id] = live.model_copy(update={"tags": new})
        return ActionResult(outcome=ActionOutcome.DONE)

    def price(self, instance: Instance) -> PriceQuote | None:
        return PriceQuote(usd_per_hour=self.usd_per_hour, source="test price")

    def restart(self, iid: str) -> None:
        """The owner starts it again (outside costguard)."""
        live = self.instances[iid]
        self.instances[iid] = live.model_copy(update={"state": InstanceState.RUNNING})
