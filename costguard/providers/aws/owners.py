"""Who owns an EC2 instance: read from the tags the listing already returns, and for Auto
Scaling groups sized with one `DescribeAutoScalingGroups` per 50 groups of a scope.

The conventions, each from the owning service's documentation:
- EC2 Auto Scaling tags every member `aws:autoscaling:groupName` ("Tag Auto Scaling groups
  and instances").
- EKS managed node groups tag their instances `eks:cluster-name` and `eks:nodegroup-name`;
  self-managed nodes of any Kubernetes cluster on EC2 carry `kubernetes.io/cluster/<name>`
  (value `owned` or `shared`).
- Karpenter tags the nodes it launches `karpenter.sh/nodepool` (v1; `karpenter.sh/
  provisioner-name` before v0.32) and `eks:eks-cluster-name`.
- AWS Batch tags its compute environments' instances `AWSBatchServiceTag`, and names their
  Auto Scaling groups `AWSBatch-<compute environment>-asg-<uuid>`.
- EMR: `aws:elasticmapreduce:job-flow-id` (and `...:instance-group-role`).
- EC2 Fleet `aws:ec2:fleet-id`; Spot Fleet `aws:ec2spot:fleet-request-id`.
- AWS ParallelCluster: `parallelcluster:cluster-name`.
- Ray's cluster launcher: `ray-cluster-name` (and `ray-node-type`); SkyPilot adds
  `skypilot-cluster-name` to the same.

Any other `aws:` system tag marks the instance as managed by an unknown service: AWS writes
those tags, users cannot, so something launched it on its own behalf. Two system tags say
nothing about an owner and are skipped: `aws:cloudformation:*` (a stack created the instance
once; nothing recreates it when stopped) and `aws:ec2launchtemplate:*` (it was launched from
a template, as pets often are).

Where an instance has several owners' tags, the one that schedules work on it wins: a
Kubernetes node in an Auto Scaling group is the cluster's (draining it is the cluster
autoscaler's job), an AWS Batch worker in one is Batch's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from costguard.errors import ProviderError
from costguard.model import (
    Instance,
    Owner,
    OwnerKind,
)
from costguard.providers.aws.boundary import aws_call

log = logging.getLogger(__name__)

ASG_TAG = "aws:autoscaling:groupName"
ASG_NAMES_PER_CALL = 50  # DescribeAutoScalingGroups: at most 50 names per request
_NOT_OWNERS = ("aws:cloudformation:", "aws:ec2launchtemplate:")
_K8S_CLUSTER = "kubernetes.io/cluster/"
# a cluster's own tag on its instances, in order (SkyPilot adds Ray's tag to its own)
_CLUSTERS = (("aws:elasticmapreduce:job-flow-id", OwnerKind.EMR),
             ("parallelcluster:cluster-name", OwnerKind.PARALLELCLUSTER),
             ("skypilot-cluster-name", OwnerKind.SKYPILOT),
             ("ray-cluster-name", OwnerKind.RAY))


def _cluster_of(tags: Mapping[str, str]) -> str | None:
    for key in ("eks:cluster-name", "eks:eks-cluster-name"):
        if tags.get(key):
            return tags[key]
    for key in tags:
        if key.startswith(_K8S_CLUSTER) and len(key) > len(_K8S_CLUSTER):
            return key[len(_K8S_CLUSTER):]
    return None


def owner_from_tags(tags: Mapping[str, str], region: str) -> Owner | None:
    """The owner the instance's own tags name, most specific first; None: a pet VM."""
    asg = tags.get(ASG_TAG)
    cluster = _cluster_of(tags)

    def owner(kind: OwnerKind, name: str, via: str, of: str | None = None) -> Owner:
        return Owner(kind=kind, name=name, scope=region, cluster=of, via=f"tag {via}")

    pool = tags.get("karpenter.sh/nodepool") or tags.get("karpenter.sh/provisioner-name")
    if pool:
        key = "karpenter.sh/nodepool" if "karpenter.sh/nodepool" in tags else \
            "karpenter.sh/provisioner-name"
        return owner(OwnerKind.KARPENTER, pool, key, cluster)
    if tags.get("eks:nodegroup-name"):
        return owner(OwnerKind.EKS, tags["eks:nodegroup-name"], "eks:nodegroup-name", cluster)
    if cluster is not None:  # a self-managed node of a Kubernetes cluster
        return owner(OwnerKind.EKS, asg or cluster, f"{_K8S_CLUSTER}{cluster}", cluster)
    if "AWSBatchServiceTag" in tags or (asg and asg.startswith("AWSBatch-")):
        name = asg.split("-asg-", 1)[0].removeprefix("AWSBatch-") if asg else \
            (tags.get("AWSBatchServiceTag") or "batch")
        return owner(OwnerKind.BATCH, name,
                     "AWSBatchServiceTag" if "AWSBatchServiceTag" in tags else ASG_TAG)
    for key, kind in _CLUSTERS:  # the tag names the cluster, which is the owner
        if tags.get(key):
            return owner(kind, tags[key], key, tags[key])
    if asg:
        return owner(OwnerKind.ASG, asg, ASG_TAG)
    if tags.get("aws:ec2:fleet-id"):
        return owner(OwnerKind.EC2_FLEET, tags["aws:ec2:fleet-id"], "aws:ec2:fleet-id")
    if tags.get("aws:ec2spot:fleet-request-id"):
        return owner(OwnerKind.SPOT_FLEET, tags["aws:ec2spot:fleet-request-id"],
                     "aws:ec2spot:fleet-request-id")
    system = sorted(k for k in tags if k.startswith("aws:") and not k.startswith(_NOT_OWNERS))
    if system:
        return owner(OwnerKind.UNKNOWN, tags[system[0]] or system[0], system[0])
    return None


def describe_groups(autoscaling: Any, names: Iterable[str], scope: str
                    ) -> dict[str, dict[str, Any]]:
    """Each named Auto Scaling group as DescribeAutoScalingGroups returns it, 50 names a
    call; a group that no longer exists is simply absent. Raises ProviderError."""
    wanted = sorted(set(names))
    found: dict[str, dict[str, Any]] = {}
    with aws_call(f"{scope}/autoscaling"):
        for start in range(0, len(wanted), ASG_NAMES_PER_CALL):
            kwargs: dict[str, Any] = {
                "AutoScalingGroupNames": wanted[start:start + ASG_NAMES_PER_CALL],
                "MaxRecords": 100}
            while True:
                page = autoscaling.describe_auto_scaling_groups(**kwargs)
                for group in page.get("AutoScalingGroups", []):
                    found[group["AutoScalingGroupName"]] = group
                token = page.get("NextToken")
                if not token:
                    break
                kwargs["NextToken"] = token
    return found


def sized(owner: Owner, group: Mapping[str, Any]) -> Owner:
    """`owner` with the group's sizes and its own tags."""
    return owner.model_copy(update={
        "desired": group.get("DesiredCapacity"), "min_size": group.get("MinSize"),
        "max_size": group.get("MaxSize"),
        "tags": {t["Key"]: t.get("Value", "") for t in group.get("Tags", [])}})


_SIZED = ("DesiredCapacity", "MinSize", "MaxSize", "Tags")  # what `sized` reads of a group


class GroupSizes:
    """The Auto Scaling groups the inventory sized, reused for `max_age`: a group's sizes
    and tags are enrichment (no action trusts them: scale-in and resize read the group
    again first, groups.py), and asking again every cycle was a third of a steady cycle's
    calls at organisation scale. A group costguard resizes is forgotten at once."""

    def __init__(self, max_age: timedelta) -> None:
        self.max_age = max_age
        self._lock = threading.Lock()
        self._groups: dict[tuple[str, str], tuple[datetime, dict[str, Any] | None]] = {}

    def read(self, autoscaling: Any, scope: str, names: set[str], now: datetime
             ) -> dict[str, dict[str, Any]]:
        """The named groups of `scope` (a group that no longer exists is absent), asked for
        those not read within `max_age` of `now`. Raises ProviderError."""
        with self._lock:
            held = {n: self._groups.get((scope, n)) for n in names}
        out = {n: hit[1] for n, hit in held.items()
               if hit is not None and now - hit[0] < self.max_age}
        missing = names - out.keys()
        if missing:
            found = describe_groups(autoscaling, missing, scope)
            with self._lock:
                for name in missing:
                    group = found.get(name)
                    kept = None if group is None else {k: group[k] for k in _SIZED
                                                       if k in group}
                    self._groups[(scope, name)] = (now, kept)
                    out[name] = kept
        return {n: g for n, g in out.items() if g is not None}

    def forget(self, scope: str, name: str) -> None:
        with self._lock:
            self._groups.pop((scope, name), None)


def with_group_sizes(instances: Sequence[Instance], autoscaling: Any, scope: str,
                     sizes: GroupSizes, now: datetime) -> list[Instance]:
    """`instances` with their Auto Scaling groups' sizes and tags filled in: one call per 50
    groups of the scope not read within `sizes.max_age`. Sizes are enrichment: when the call
    fails the members stay managed (no sizes, so no scale-in acts on them) and the scope is
    not lost."""
    names = {i.owner.name for i in instances if i.owner and i.owner.kind is OwnerKind.ASG}
    if not names:
        return list(instances)
    try:
        groups = sizes.read(autoscaling, scope, names, now)
    except ProviderError as exc:
        log.warning("Auto Scaling group sizes not read for %s: %s", scope, exc)
        return list(instances)
    out = []
    for inst in instances:
        group = groups.get(inst.owner.name) if inst.owner and \
            inst.owner.kind is OwnerKind.ASG else None
        out.append(inst if group is None or inst.owner is None else
                   inst.model_copy(update={"owner": sized(inst.owner, group)}))
    return out
