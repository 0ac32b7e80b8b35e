"""Managed fleets in the simulated cloud: an Auto Scaling group and a Kubernetes node pool.

They behave as their real controllers do where it matters to costguard:
- the Auto Scaling group keeps `desired` members running. A member that stops or vanishes
  other than by a scale-in is replaced with a new instance at the next listing (EC2 Auto
  Scaling marks a stopped member unhealthy and launches a replacement), so a wrong `stop`
  shows as churn, not savings; `scale_in` removes a member and lowers `desired`, never
  below `min_size`.
- the node pool's nodes carry GKE's labels; nothing in the sim acts on them.

Members are tagged as the real clouds tag them (`aws:autoscaling:groupName`; the GKE
labels), so the same owner readers as for AWS and GCP recognise them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from costguard.demo.sim_fleet import SIM_TYPES, SimHost, gpu_memory_mib
from costguard.model import (
    AT_MINIMUM,
    ActionOutcome,
    ActionResult,
    Instance,
    InstanceState,
    Owner,
    OwnerKind,
)

if TYPE_CHECKING:
    from costguard.demo.sim_settings import SimSettings


@dataclass
class SimGroup:
    owner: Owner  # kind, name, scope and the group's own tags; sizes come from the fields
    desired: int
    min_size: int
    max_size: int
    instance_type: str
    profile: str  # how its members' GPUs behave (sim.PROFILES)
    member_tags: dict[str, str]
    members: list[str] = field(default_factory=list)
    replaced: int = 0  # members the controller replaced (a stop it did not ask for)

    def sized(self) -> Owner:
        return self.owner.model_copy(update={
            "desired": self.desired, "min_size": self.min_size, "max_size": self.max_size})

    def can_shrink(self) -> str | None:
        """None when a member may go, else why not."""
        if self.desired - 1 < self.min_size:
            return (f"{self.owner.name} is {AT_MINIMUM} (desired {self.desired}, min "
                    f"{self.min_size}); lower its minimum to let it shrink")
        return None


def demo_groups(region: str, account: str) -> list[SimGroup]:
    """The demo's managed fleets: an idle Auto Scaling group of four GPU instances (min 1)
    and an idle GKE-like node pool of two GPU nodes."""
    asg_tags = {"team": "recsys", "owner": "ivo@example.com", "env": "prod"}
    pool_labels = {"goog-k8s-cluster-name": "ml-serving", "goog-k8s-node-pool-name": "gpu-pool",
                   "goog-k8s-cluster-location": region}
    return [
        SimGroup(owner=Owner(kind=OwnerKind.ASG, name="recsys-infer-asg", scope=region,
                             via="tag aws:autoscaling:groupName", tags=asg_tags),
                 desired=4, min_size=1, max_size=8, instance_type="g5.xlarge",
                 profile="empty",
                 member_tags={"aws:autoscaling:groupName": "recsys-infer-asg",
                              "Name": "recsys-infer", **asg_tags}),
        SimGroup(owner=Owner(kind=OwnerKind.GKE, name="gpu-pool", scope=region,
                             cluster="ml-serving", via="label goog-k8s-node-pool-name",
                             tags={"team": "vision"}),
                 desired=2, min_size=0, max_size=4, instance_type="g6.xlarge", profile="empty",
                 member_tags={**pool_labels, "Name": "gke-ml-serving-gpu-pool",
                              "team": "vision", "owner": "eli@example.com"}),
    ]


def member_view(inst: Instance, group: SimGroup) -> Instance:
    """How a listing shows a member: its owner with the group's sizes now."""
    return inst.model_copy(update={"owner": group.sized()})


class SimGroupOps:
    """The groups' side of SimProvider: members, the controllers, scale-in and resizing.
    Relies on SimProvider's `_lock`, `_hosts`, `_serial`, `settings`, `clock`, `calls`,
    `_host` and `_set_state`."""

    groups: dict[str, SimGroup]  # member id -> its group
    settings: SimSettings
    _lock: threading.Lock
    _hosts: dict[str, SimHost]
    _serial: int
    calls: dict[str, int]
    clock: Any
    _host: Any
    _set_state: Any

    def _add_member(self, group: SimGroup, launched: datetime) -> SimHost:
        self._serial += 1
        gpus, model = SIM_TYPES[group.instance_type]
        mem_mib = gpu_memory_mib(group.instance_type)
        iid = f"i-sim{self.settings.seed:02d}{self._serial:06d}"
        region = group.owner.scope
        inst = Instance(
            provider="sim", account=self.settings.accounts[0], region=region,
            zone=f"{region}a", instance_id=iid, name=group.member_tags.get("Name"),
            instance_type=group.instance_type, state=InstanceState.RUNNING,
            gpu_count=gpus, gpu_model=model, gpu_memory_mib=mem_mib,
            launch_time=launched, tags=dict(group.member_tags), observed_at=launched,
            owner=group.sized())
        host = SimHost(instance=inst, profile=group.profile, disk_gib=100)
        self._hosts[iid] = host
        group.members.append(iid)
        self.groups[iid] = group
        return host

    def _controllers(self, now: datetime) -> None:
        """Each Auto Scaling group keeps `desired` members running: one stopped or gone
        other than by a scale-in is replaced (and terminated), as EC2 Auto Scaling does."""
        for group in {id(g): g for g in self.groups.values()}.values():
            if not group.owner.kind.scalable:
                continue
            for iid in list(group.members):
                host = self._hosts[iid]
                if host.instance.state in (InstanceState.STOPPED, InstanceState.STOPPING):
                    self._set_state(host, InstanceState.TERMINATED, now,
                                    reason="unhealthy in its Auto Scaling group: replaced")
                    group.replaced += 1
                if host.instance.state is InstanceState.TERMINATED:
                    group.members.remove(iid)
            while len(group.members) > group.desired:  # scaled down: the newest go first
                self._set_state(self._hosts[group.members.pop()], InstanceState.TERMINATED,
                                now, reason="the group's desired capacity dropped")
            while len(group.members) < group.desired:
                self._add_member(group, now)

    def scale_in(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        """Remove a member from its group and lower the group's desired size (never below
        its minimum): the sim's TerminateInstanceInAutoScalingGroup."""
        now = self.clock.now()
        with self._lock:
            self.calls["scale_in"] = self.calls.get("scale_in", 0) + 1
            group = self.groups.get(instance.instance_id)
            host = self._host(instance)
            if group is None or instance.instance_id not in group.members:
                return ActionResult(outcome=ActionOutcome.SKIPPED,
                                    detail="not a member of a group")
            if not group.owner.kind.scalable:
                return ActionResult(outcome=ActionOutcome.SKIPPED,
                                    detail=f"{group.owner} cannot be scaled in by costguard")
            why_not = group.can_shrink()
            if why_not is not None:
                return ActionResult(outcome=ActionOutcome.SKIPPED, detail=why_not)
            sizes = f"desired {group.desired} -> {group.desired - 1} (min {group.min_size})"
            if dry_run:
                return ActionResult(outcome=ActionOutcome.DRY_RUN,
                                    detail=f"would remove it from {group.owner.name}: {sizes}")
            group.desired -= 1
            group.members.remove(instance.instance_id)
            self._set_state(host, InstanceState.TERMINATED, now,
                            reason="scaled in by costguard")
            return ActionResult(outcome=ActionOutcome.DONE,
                                detail=f"removed from {group.owner.name}: {sizes}",
                                state_after=InstanceState.TERMINATED)

    def resize_group(self, member: Instance, *, min_size: int, desired: int, max_size: int,
                     hint: str | None, dry_run: bool) -> ActionResult:
        """Set a group's sizes (the sim's UpdateAutoScalingGroup); its controller then
        terminates or launches members to match at the next listing."""
        with self._lock:
            self.calls["resize_group"] = self.calls.get("resize_group", 0) + 1
            owner = member.owner
            group = next((g for g in self.groups.values() if owner is not None
                          and g.owner.name == owner.name), None)
            if group is None or not group.owner.kind.scalable:
                return ActionResult(outcome=ActionOutcome.SKIPPED,
                                    detail="no such group costguard can resize")
            sizes = (f"min {group.min_size}, desired {group.desired}, max {group.max_size} -> "
                     f"{min_size}, {desired}, {max_size}")
            if dry_run:
                return ActionResult(outcome=ActionOutcome.DRY_RUN, detail=f"would set {sizes}")
            group.min_size, group.desired, group.max_size = min_size, desired, max_size
            if hint is None:
                group.owner.tags.pop("costguard:parked-sizes", None)
            else:
                group.owner.tags["costguard:parked-sizes"] = hint
            return ActionResult(outcome=ActionOutcome.DONE, detail=f"{group.owner.name}: {sizes}")
