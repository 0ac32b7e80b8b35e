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

from dataclasses import dataclass, field

from costguard.model import AT_MINIMUM, Instance, Owner, OwnerKind


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
