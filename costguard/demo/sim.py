"""The simulated cloud: a seeded fleet of GPU and CPU instances that behaves like a real one.

GPU activity is resampled from the real H100 NVML recording (`telemetry/data/`), phase by
phase: training runs (busy), bursty jobs, notebooks holding VRAM overnight, loops of tiny
kernels that fool `utilization.gpu`, and boxes with no process at all. Some hosts run no
agent (no telemetry: never stopped as idle). Everything follows the injected clock, so the
demo runs 48 hours in seconds.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from functools import cache

from costguard.clock import Clock
from costguard.demo.sim_fleet import SIM_TYPES, SimHost, gpu_memory_mib
from costguard.demo.sim_groups import SimGroup, SimGroupOps, demo_groups, member_view
from costguard.demo.sim_hosts import (
    accelerator_hosts,
    gpu_phase,
    host_figures,
    notebook_hosts,
    underused_hosts,
    work_in_progress_hosts,
)
from costguard.demo.sim_prices import DISK_USD_PER_GIB_MONTH, sim_price
from costguard.demo.sim_settings import SimSettings
from costguard.demo.sim_standing import SimStanding, SimStandingOps, seeded
from costguard.errors import InstanceNotFound
from costguard.minute_rows import MinuteRows, names_of
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
from costguard.providers.base import tag_detail
from costguard.telemetry.summary import sim_row

GPU_WEIGHTS = {"p5.48xlarge": 3, "p4d.24xlarge": 8, "p3.2xlarge": 10, "g5.xlarge": 25,
               "g5.12xlarge": 12, "g6.xlarge": 12, "g4dn.xlarge": 20}
CPU_TYPES = ["m5.large", "c5.xlarge", "r5.2xlarge"]

TEAMS = ["research", "ml-platform", "vision", "nlp", "recsys"]
OWNERS = {
    "research": ["ana", "bo"], "ml-platform": ["chen", "dee"], "vision": ["eli", "fay"],
    "nlp": ["gus", "hana"], "recsys": ["ivo", "jun"],
}
# how the GPUs of a host behave over the day; weights for a fleet draw
PROFILES = {
    "training": 30,  # busy around the clock
    "bursty": 12,  # 2 s of matmuls every 10 s: active though util reads ~20%
    "notebook": 20,  # busy in office hours, then holds VRAM all night doing nothing
    "forgotten": 10,  # holds memory, never runs a kernel
    "tiny-kernels": 6,  # a polling loop of trivial kernels: util_gpu ~12%, SMs idle
    "empty": 8,  # no process at all
    "no-agent": 7,  # nothing reports: must never be stopped as idle
    "finishes": 7,  # trains for a while, then the job ends and the box sits idle
}


class SimProvider(SimGroupOps, SimStandingOps):
    """In-memory cloud implementing the Provider protocol."""

    name: ProviderName = "sim"

    def __init__(self, settings: SimSettings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self._rng = random.Random(settings.seed)
        self._lock = threading.Lock()
        self._hosts: dict[str, SimHost] = {}
        self._serial = 0
        self._last_launch_check = clock.now()
        self._epoch = clock.now()  # the noise of a minute is seeded relative to this
        self._week_shift = timedelta(hours=settings.week_shift_hours)
        self.calls: dict[str, int] = {"list": 0, "metrics": 0, "stop": 0, "start": 0, "tags": 0,
                                      "describe": 0, "terminate": 0, "describe_many": 0,
                                      "stop_many": 0, "tags_many": 0}
        start = clock.now()
        for _ in range(settings.instances):
            launched = start - timedelta(hours=self._rng.uniform(0.5, 24 * 10))
            self._add_host(launched)
        self.groups: dict[str, SimGroup] = {}  # member id -> its group
        if settings.managed_groups:  # after the seeded fleet, which stays as it was
            for group in demo_groups(settings.regions[0], settings.accounts[0]):
                for _ in range(group.desired):
                    self._add_member(group, start - timedelta(hours=30))
        if settings.underused_hosts:  # after the groups: their ids stay as they were
            for host in underused_hosts(settings.accounts[0], settings.regions[0],
                                        self._serial + 1, settings.seed,
                                        start - timedelta(days=9)):
                self._serial += 1
                self._hosts[host.instance.instance_id] = host
        if settings.work_in_progress_hosts:  # after those: theirs stay as they were too
            for host in work_in_progress_hosts(settings.accounts[0], settings.regions[0],
                                               self._serial + 1, settings.seed,
                                               start - timedelta(hours=2)):
                self._serial += 1
                self._hosts[host.instance.instance_id] = host
        if settings.accelerator_hosts:  # after those: theirs stay as they were too
            for host in accelerator_hosts(settings.accounts[0], settings.regions[0],
                                          self._serial + 1, settings.seed,
                                          start - timedelta(days=3),
                                          busy_until=start + timedelta(hours=4)):
                self._serial += 1
                self._hosts[host.instance.instance_id] = host
        if settings.notebook_hosts:  # after those: theirs stay as they were too
            for host in notebook_hosts(settings.accounts[0], settings.regions[0],
                                       self._serial + 1, settings.seed,
                                       start - timedelta(days=2)):
                self._serial += 1
                self._hosts[host.instance.instance_id] = host
        self.standing = SimStanding(
            seeded(settings.accounts[0], settings.regions[0], start) if settings.standing
            else [], clock)

    # -- fleet construction -------------------------------------------------------------
    def _add_host(self, launched: datetime) -> SimHost:
        rng = self._rng
        self._serial += 1
        gpu = rng.random() < 0.7
        itype = (rng.choices(list(GPU_WEIGHTS), weights=list(GPU_WEIGHTS.values()))[0]
                 if gpu else rng.choice(CPU_TYPES))
        gpus, model = SIM_TYPES[itype]
        mem_mib = gpu_memory_mib(itype)
        team = rng.choice(TEAMS)
        tags: dict[str, str] = {}
        roll = rng.random()
        if roll < 0.12:
            name = f"tmp-{self._serial}"  # untagged: nobody answers for it
        elif roll < 0.18:
            name = f"{team[:3]}-box-{self._serial}"  # only a name: attribution derives it
            tags["Name"] = name
        else:
            owner = rng.choice(OWNERS[team])
            name = f"{team}-{itype.split('.')[0]}-{self._serial}"
            tags.update({"Name": name, "team": team, "owner": f"{owner}@example.com",
                         "env": rng.choice(["dev", "dev", "prod", "research"])})
            if rng.random() < 0.4:
                tags["project"] = rng.choice(["llm-pretrain", "ranking", "detector", "asr"])
        if rng.random() < 0.08:
            tags["costguard:protect"] = "true"
        region = rng.choice(self.settings.regions)
        profile = rng.choices(list(PROFILES), weights=list(PROFILES.values()))[0] if gpu else "cpu"
        iid = f"i-sim{self.settings.seed:02d}{self._serial:06d}"
        inst = Instance(
            provider="sim", account=rng.choice(self.settings.accounts), region=region,
            zone=f"{region}{rng.choice('abc')}", instance_id=iid, name=name,
            instance_type=itype, state=InstanceState.RUNNING,
            lifecycle=Lifecycle.SPOT if rng.random() < 0.3 else Lifecycle.ON_DEMAND,
            gpu_count=gpus, gpu_model=model,
            gpu_memory_mib=mem_mib,
            launch_time=launched, tags=tags, observed_at=launched,
        )
        # runs as its team's instance profile (derived, not drawn: the seeded fleet stays)
        inst = inst.model_copy(update={
            "launched_by": f"arn:aws:iam::{inst.account}:instance-profile/{team}-gpu"})
        host = SimHost(instance=inst, profile=profile,
                       # from the serial, not the rng: the seeded fleet stays as it was
                       disk_gib=(100, 200, 500, 1000)[self._serial % 4] if gpu else 50)
        if profile == "finishes":
            host.busy_until = self.clock.now() + timedelta(hours=rng.uniform(1, 30))
        self._hosts[iid] = host
        return host

    def _maybe_launch(self, now: datetime) -> None:
        elapsed_days = (now - self._last_launch_check).total_seconds() / 86400
        expected = elapsed_days * self.settings.launches_per_day
        self._last_launch_check = now
        while expected > 0:
            if self._rng.random() < min(expected, 1.0):
                self._add_host(now - timedelta(minutes=self._rng.uniform(0, 30)))
            expected -= 1.0

    # -- behaviour -----------------------------------------------------------------------
    def phase(self, host: SimHost, minute: datetime) -> str | None:
        """The recorded NVML phase this host's GPUs are in at `minute` (None: no telemetry)."""
        p = host.profile
        if p in ("no-agent", "cpu"):
            return None
        if p in ("training", "underused"):  # an underused host's GPUs: gpu_phase
            return "busy"
        if p == "bursty":
            return "bursty"
        if p == "forgotten":
            return "held_memory_idle"
        if p == "tiny-kernels":
            return "tiny_kernels"
        if p == "empty":
            return "no_process"
        if p == "finishes":
            return "busy" if host.busy_until and minute < host.busy_until else "no_process"
        # notebook: office hours on weekdays of the fleet's week, VRAM held the rest of the time
        local = minute + self._week_shift
        office = local.weekday() < 5 and 9 <= local.hour < 18
        return "bursty" if office else "held_memory_idle"

    def _running_at(self, host: SimHost, minute: datetime) -> bool:
        if minute < host.instance.launch_time:
            return False
        state = InstanceState.RUNNING
        for when, st in host.history:
            if when <= minute:
                state = st
        return state is InstanceState.RUNNING

    # -- Provider protocol -------------------------------------------------------------------
    def list_instances(self) -> Inventory:
        now = self.clock.now()
        with self._lock:
            self.calls["list"] += 1
            self._maybe_launch(now)
            self._spot_interruptions(now)
            self._owners_come_back(now)
            self._controllers(now)
            seen = [self._view(h, now) for h in self._hosts.values()
                    if h.instance.launch_time <= now]
        return Inventory(instances=seen)

    def fleet_now(self) -> list[Instance]:
        """The fleet's instances as they are now, without a listing's side effects."""
        now = self.clock.now()
        with self._lock:
            return [h.instance for h in self._hosts.values() if h.instance.launch_time <= now]

    def _spot_interruptions(self, now: datetime) -> None:
        # roughly one interruption a day across the spot fleet
        for host in self._hosts.values():
            inst = host.instance
            if (inst.lifecycle is Lifecycle.SPOT and inst.state is InstanceState.RUNNING
                    and self._rng.random() < 0.0004):
                self._set_state(host, InstanceState.STOPPED, now,
                                reason="Server.SpotInstanceTermination")

    def _owners_come_back(self, now: datetime) -> None:
        # a notebook stopped overnight is started again by its owner in the morning
        local = now + self._week_shift
        if local.weekday() >= 5 or not 9 <= local.hour < 10:
            return
        for host in self._hosts.values():
            if (host.profile == "notebook" and host.instance.state is InstanceState.STOPPED
                    and host.stopped_at is not None and now - host.stopped_at > timedelta(hours=2)):
                self._set_state(host, InstanceState.RUNNING, now, reason=None)
                host.stopped_at, host.started_at = None, now

    def gpu_metrics(
        self, instances: Sequence[Instance], start: datetime, end: datetime
    ) -> MinuteRows:
        """Each running GPU's minutes of [start, end), resampled from the real recording, as
        rows (`MinuteRows`), as a real cloud's provider hands its readings over."""
        self.calls["metrics"] += 1
        first = start.replace(second=0, microsecond=0)
        if first < start:
            first += timedelta(minutes=1)
        names = _reading_names()
        rows: list[tuple[object, ...]] = []
        rng = random.Random(hash((self.settings.seed, (first - self._epoch).total_seconds())))
        for inst in instances:
            host = self._hosts.get(inst.instance_id)
            if host is None or not inst.has_gpu:
                continue
            minute = first
            while minute < end:
                phase = self.phase(host, minute)
                if phase is not None and self._running_at(host, minute):
                    figures = host_figures(host, phase, minute)
                    for gpu in range(inst.gpu_count):
                        rows.append(sim_row(gpu_phase(host, phase, gpu), names, "sim",
                                            inst.instance_id, gpu, minute, rng,
                                            extra=figures))
                minute += timedelta(minutes=1)
        return MinuteRows(names, rows)

    def _set_state(self, host: SimHost, state: InstanceState, now: datetime,
                   reason: str | None = None) -> None:
        host.history.append((now, state))
        host.instance = host.instance.model_copy(update={"state": state, "state_reason": reason})

    def _host(self, instance: Instance) -> SimHost:
        host = self._hosts.get(instance.instance_id)
        if host is None:
            raise InstanceNotFound("sim", instance.account, f"no instance {instance.instance_id}")
        return host

    def _transition(self, instance: Instance, want_from: InstanceState, to: InstanceState,
                    verb: str, dry_run: bool) -> ActionResult:
        now = self.clock.now()
        with self._lock:
            self.calls[verb] += 1
            host = self._host(instance)
            group = self.groups.get(instance.instance_id)
            if group is not None:  # the last guard: a member is never acted on alone
                return ActionResult(outcome=ActionOutcome.SKIPPED,
                                    detail=f"managed by {group.owner}: not acted on alone",
                                    state_after=host.instance.state)
            if host.instance.state is not want_from:
                return ActionResult(outcome=ActionOutcome.SKIPPED,
                                    detail=f"instance is {host.instance.state}, not {want_from}",
                                    state_after=host.instance.state)
            if dry_run:
                return ActionResult(outcome=ActionOutcome.DRY_RUN,
                                    detail=f"would {verb}", state_after=host.instance.state)
            self._set_state(host, to, now, reason="User initiated (costguard)")
            if to is InstanceState.STOPPED:
                host.stopped_at = now
            else:
                host.started_at = now
            return ActionResult(outcome=ActionOutcome.DONE, state_after=to)

    def stop(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        return self._transition(instance, InstanceState.RUNNING, InstanceState.STOPPED,
                                "stop", dry_run)

    def start(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        return self._transition(instance, InstanceState.STOPPED, InstanceState.RUNNING,
                                "start", dry_run)

    def set_tags(self, instance: Instance, tags: Mapping[str, str], *,
                 remove: Sequence[str] = (), dry_run: bool) -> ActionResult:
        with self._lock:
            self.calls["tags"] += 1
            host = self._host(instance)
            if dry_run:
                return ActionResult(outcome=ActionOutcome.DRY_RUN, detail="would tag")
            new = {k: v for k, v in host.instance.tags.items() if k not in remove}
            new.update(tags)
            host.instance = host.instance.model_copy(update={"tags": new})
            return ActionResult(outcome=ActionOutcome.DONE, state_after=host.instance.state,
                                detail=tag_detail(tags, remove))

    def price(self, instance: Instance) -> PriceQuote | None:
        return sim_price(instance)

    # -- optional capabilities (the act stage checks for them with hasattr) -------------------
    def describe(self, instance: Instance) -> Instance | None:
        """The instance as it is right now (None: gone), for the re-check before acting."""
        with self._lock:
            self.calls["describe"] += 1
            host = self._hosts.get(instance.instance_id)
            if host is None or host.instance.state is InstanceState.TERMINATED:
                return None
            return self._view(host, self.clock.now())

    def _view(self, host: SimHost, now: datetime) -> Instance:
        group = self.groups.get(host.instance.instance_id)
        inst = host.instance.model_copy(update={"observed_at": now})
        return member_view(inst, group) if group is not None else inst

    def describe_many(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
        """`describe` for many instances in one call (base.Describes)."""
        with self._lock:
            self.calls["describe_many"] += 1
            self.calls["describe"] -= len(instances)  # counted once above, not per instance
        return {i.instance_id: self.describe(i) for i in instances}

    def stop_many(self, instances: Sequence[Instance], *, dry_run: bool
                  ) -> dict[str, ActionResult]:
        """`stop` for many instances in one call (base.BatchActions)."""
        with self._lock:
            self.calls["stop_many"] += 1
            self.calls["stop"] -= len(instances)
        out: dict[str, ActionResult] = {}
        for inst in instances:
            try:
                out[inst.instance_id] = self.stop(inst, dry_run=dry_run)
            except InstanceNotFound:
                out[inst.instance_id] = ActionResult(outcome=ActionOutcome.SKIPPED,
                                                     detail="no longer exists")
        return out

    def set_tags_many(self, instances: Sequence[Instance], tags: Mapping[str, str], *,
                      remove: Sequence[str] = (), dry_run: bool) -> dict[str, ActionResult]:
        """`set_tags` for many instances in one call (base.BatchActions)."""
        with self._lock:
            self.calls["tags_many"] += 1
            self.calls["tags"] -= len(instances)
        out: dict[str, ActionResult] = {}
        for inst in instances:
            try:
                out[inst.instance_id] = self.set_tags(inst, tags, remove=remove, dry_run=dry_run)
            except InstanceNotFound:
                out[inst.instance_id] = ActionResult(outcome=ActionOutcome.SKIPPED,
                                                     detail="no longer exists")
        return out

    def terminate(self, instance: Instance, *, snapshot: bool, dry_run: bool) -> ActionResult:
        """Terminate a stopped instance, snapshotting its disk first when asked."""
        now = self.clock.now()
        with self._lock:
            self.calls["terminate"] += 1
            host = self._host(instance)
            if host.instance.state is not InstanceState.STOPPED:
                return ActionResult(outcome=ActionOutcome.SKIPPED,
                                    detail=f"instance is {host.instance.state}, not stopped",
                                    state_after=host.instance.state)
            snap = f"snap-{instance.instance_id}-{now:%Y%m%d%H%M}" if snapshot else ""
            if dry_run:
                return ActionResult(outcome=ActionOutcome.DRY_RUN,
                                    detail="would " + (f"snapshot ({snap}) and " if snap else "")
                                    + "terminate", state_after=host.instance.state)
            if snap:
                host.snapshots.append(snap)
            self._set_state(host, InstanceState.TERMINATED, now,
                            reason="User initiated (costguard)")
            return ActionResult(outcome=ActionOutcome.DONE,
                                detail=f"snapshot {snap}, terminated" if snap else "terminated",
                                state_after=InstanceState.TERMINATED)

    def stopped_cost(self, instance: Instance) -> PriceQuote | None:
        """What a stopped instance still costs per hour: its attached disks."""
        host = self._hosts.get(instance.instance_id)
        if host is None:
            return None
        return PriceQuote(usd_per_hour=round(host.disk_gib * DISK_USD_PER_GIB_MONTH / 730, 4),
                          source=f"{host.disk_gib} GiB gp3 at ${DISK_USD_PER_GIB_MONTH}/GiB-month")

    def on_demand_price(self, instance: Instance) -> float | None:
        quote = self.price(instance.model_copy(update={"lifecycle": Lifecycle.ON_DEMAND}))
        return quote.usd_per_hour if quote else None

    def profile_of(self, instance_id: str) -> str:
        return self._hosts[instance_id].profile


@cache
def _reading_names() -> tuple[str, ...]:
    """What a simulated reading's row holds: every field a reading has (those a recorded
    minute and a simulated host's figures do not set are none)."""
    return names_of(GpuMinute.model_fields)
