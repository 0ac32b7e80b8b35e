"""A small in-test cloud: a handful of GPU instances whose busyness each test sets by hand.

It implements the Provider protocol plus the optional `describe`, `terminate` and
`stopped_cost` capabilities (each can be switched off to test providers without them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlmodel import select

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
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
    TelemetrySource,
)
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow, PolicyStateRow

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)  # a Monday
PRICE = 4.0  # on-demand USD/h of every fake instance
SPOT_PRICE = 1.5


@dataclass
class FakeCloud:
    clock: ManualClock
    name: ProviderName = "sim"
    instances: dict[str, Instance] = field(default_factory=dict)
    busy: dict[str, bool | None] = field(default_factory=dict)  # None: no telemetry
    calls: list[tuple[str, str]] = field(default_factory=list)
    can_describe: bool = True
    can_terminate: bool = True

    def add(self, iid: str, *, busy: bool | None = False, tags: dict[str, str] | None = None,
            gpus: int = 1, lifecycle: Lifecycle = Lifecycle.ON_DEMAND,
            launched: datetime | None = None) -> Instance:
        inst = Instance(provider="sim", account="acct", region="us-east-1", zone="us-east-1a",
                        instance_id=iid, name=iid, instance_type="g5.xlarge",
                        state=InstanceState.RUNNING, lifecycle=lifecycle, gpu_count=gpus,
                        gpu_model="A10G",
                        launch_time=launched or self.clock.now() - timedelta(days=1),
                        tags={"owner": "ana@example.com", "team": "research", **(tags or {})},
                        observed_at=self.clock.now())
        self.instances[iid] = inst
        self.busy[iid] = busy
        return inst

    def set(self, iid: str, **update: object) -> None:
        self.instances[iid] = self.instances[iid].model_copy(update=update)

    # -- Provider protocol -------------------------------------------------------------
    def list_instances(self) -> Inventory:
        now = self.clock.now()
        return Inventory(instances=[i.model_copy(update={"observed_at": now})
                                    for i in self.instances.values()])

    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        out: list[GpuMinute] = []
        first = start.replace(second=0, microsecond=0)
        for inst in instances:
            busy = self.busy.get(inst.instance_id)
            if busy is None or self.instances[inst.instance_id].state != InstanceState.RUNNING:
                continue
            level = 60.0 if busy else 0.0
            minute = first
            while minute < end:
                for gpu in range(inst.gpu_count):
                    out.append(GpuMinute(provider="sim", instance_id=inst.instance_id,
                                         gpu_index=gpu, minute=minute,
                                         source=TelemetrySource.SIM, samples=60,
                                         util_mean=level, util_max=level, sm_mean=level,
                                         sm_max=level, process_count=1 if busy else 0))
                minute += timedelta(minutes=1)
        return out

    def _move(self, verb: str, inst: Instance, want: InstanceState, to: InstanceState,
              dry_run: bool) -> ActionResult:
        self.calls.append((verb, inst.instance_id))
        cur = self.instances[inst.instance_id]
        if cur.state is not want:
            return ActionResult(outcome=ActionOutcome.SKIPPED, detail=f"is {cur.state}")
        if dry_run:
            return ActionResult(outcome=ActionOutcome.DRY_RUN, detail=f"would {verb}")
        self.set(inst.instance_id, state=to)
        return ActionResult(outcome=ActionOutcome.DONE, state_after=to)

    def stop(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        return self._move("stop", instance, InstanceState.RUNNING, InstanceState.STOPPED,
                          dry_run)

    def start(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        return self._move("start", instance, InstanceState.STOPPED, InstanceState.RUNNING,
                          dry_run)

    def set_tags(self, instance: Instance, tags: Mapping[str, str], *,
                 remove: Sequence[str] = (), dry_run: bool) -> ActionResult:
        self.calls.append(("tag", instance.instance_id))
        if dry_run:
            return ActionResult(outcome=ActionOutcome.DRY_RUN)
        cur = self.instances[instance.instance_id]
        new = {k: v for k, v in cur.tags.items() if k not in remove} | dict(tags)
        self.set(instance.instance_id, tags=new)
        return ActionResult(outcome=ActionOutcome.DONE)

    def price(self, instance: Instance) -> PriceQuote | None:
        spot = instance.lifecycle is Lifecycle.SPOT
        return PriceQuote(usd_per_hour=SPOT_PRICE if spot else PRICE, source="fake")

    def __getattr__(self, name: str) -> object:
        # optional capabilities, present only while switched on
        if name == "describe" and self.can_describe:
            return self._describe
        if name == "terminate" and self.can_terminate:
            return self._terminate
        if name == "stopped_cost":
            return lambda inst: PriceQuote(usd_per_hour=0.02, source="100 GiB disk")
        raise AttributeError(name)

    def _describe(self, instance: Instance) -> Instance | None:
        self.calls.append(("describe", instance.instance_id))
        return self.instances.get(instance.instance_id)

    def _terminate(self, instance: Instance, *, snapshot: bool, dry_run: bool) -> ActionResult:
        return self._move("terminate", instance, InstanceState.STOPPED,
                          InstanceState.TERMINATED, dry_run)


def make_engine(db_url: str, policy_text: str, cloud: FakeCloud) -> Engine:
    policies = parse_policy_text(policy_text)
    return Engine(Settings(), Database(db_url), {"sim": cloud}, policies, cloud.clock,
                  alert_printer=lambda kind, subject, body: None)


def run_for(engine: Engine, clock: ManualClock, duration: timedelta,
            step: timedelta = timedelta(minutes=5)) -> None:
    end = clock.now() + duration
    while clock.now() < end:
        engine.run_cycle()
        clock.advance(step)


def journal(db: Database, iid: str | None = None) -> list[ActionJournalRow]:
    with db.session() as s:
        stmt = select(ActionJournalRow).order_by(ActionJournalRow.id)  # type: ignore[arg-type]
        rows = list(s.exec(stmt))
    return [r for r in rows if iid is None or r.instance_id == iid]


def state_of(db: Database, policy: str, iid: str) -> PolicyStateRow | None:
    with db.session() as s:
        return s.get(PolicyStateRow, (policy, "sim", iid))


def alerts(db: Database, kind: str | None = None) -> list[AlertRow]:
    with db.session() as s:
        rows = list(s.exec(select(AlertRow)))
    return [a for a in rows if kind is None or a.kind == kind]
