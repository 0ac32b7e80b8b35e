"""An organisation's EC2 fleet, generated from a seed: what the org-scale fake serves and what
a cycle over it should do (bench/org_scale.py, bench/_org_aws.py).

Accounts are sized like a real organisation's, not evenly: account k holds a share
proportional to 1/(k+1)^0.8, so a few accounts hold thousands of instances (DescribeInstances
pages) and most hold a few dozen. Every account has the same regions. About 70 % of instances
are GPU types; a GPU instance is busy, idle for the last hour, went idle 20 minutes ago, or has
no agent (no GPU series); some are spot, some stopped, some protected, some members of an Auto
Scaling group (which costguard must not stop as if alone), some without a `team` tag.

Values are pure functions of the seed and the instance's index, so the fake and the bench's
expectations agree without sharing state, and a datapoint is computed when it is asked for.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

PROTECT_TAG = "costguard:protect"
ASG_TAG = "aws:autoscaling:groupName"
AMBIENT_ACCOUNT = "999999999999"  # the account the ambient (non-assumed) credentials are in
FIRST_ACCOUNT = 100_000_000_000
# type -> (GPU name, manufacturer, count, MiB each) as DescribeInstanceTypes answers (the
# values of moto's copy of EC2's answers; tests/test_bench_org.py compares); None: no GPU
TYPES: dict[str, tuple[str, str, int, int] | None] = {
    "g4dn.xlarge": ("T4", "NVIDIA", 1, 16384),
    "g5.xlarge": ("A10G", "NVIDIA", 1, 22888),
    "g5.12xlarge": ("A10G", "NVIDIA", 4, 22888),
    "g6.xlarge": ("L4", "NVIDIA", 1, 22888),
    "p4d.24xlarge": ("A100", "NVIDIA", 8, 40960),
    "p5.48xlarge": ("H100", "NVIDIA", 8, 81920),
    "m5.xlarge": None,
    "c5.2xlarge": None,
}
GPU_TYPES = [t for t, g in TYPES.items() if g is not None]
CPU_TYPES = [t for t, g in TYPES.items() if g is None]
PROFILES = (("busy", 55), ("idle", 25), ("went-idle", 12), ("no-agent", 8))
HISTORY = timedelta(hours=3)  # GPU datapoints exist this far back from `now`
LATER = timedelta(hours=7)  # ... and this far after it: the cycles that follow the first, and
# org-catch-up's cycle 6 hours on
# GetMetricData queries for a running GPU instance: its utilisation's Average and its Maximum
# (which decides idleness: points added to the series cannot lower it), and its host CPU
QUERIES_PER_GPU_INSTANCE = 3
PERIOD_S = 300  # the agent publishes every 5 minutes, aggregated by InstanceId


@dataclass(frozen=True, slots=True)
class FleetInstance:
    index: int
    instance_id: str
    account: str
    region: str
    zone: str
    itype: str
    state: str  # running | stopped
    spot: bool
    profile: str  # busy | idle | went-idle | no-agent | cpu
    tags: tuple[tuple[str, str], ...]
    group: str | None  # its Auto Scaling group

    @property
    def gpu(self) -> bool:
        return TYPES[self.itype] is not None

    @property
    def tag_map(self) -> dict[str, str]:
        return dict(self.tags)

    @property
    def private_dns(self) -> str:
        return f"ip-10-{self.index >> 16 & 255}-{self.index >> 8 & 255}-{self.index & 255}" \
               f".{self.region}.compute.internal"


@dataclass
class Fleet:
    now: datetime
    accounts: list[str]
    regions: list[str]
    instances: list[FleetInstance]
    by_scope: dict[tuple[str, str], list[FleetInstance]] = field(default_factory=dict)
    by_id: dict[str, FleetInstance] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for inst in self.instances:
            self.by_scope.setdefault((inst.account, inst.region), []).append(inst)
            self.by_id[inst.instance_id] = inst

    # -- what a correct cycle does ------------------------------------------------------

    def expected_stopped(self) -> set[str]:
        """Running, unprotected GPU instances idle for the whole last hour, not owned by an
        Auto Scaling group (a member is never stopped as if alone)."""
        return {i.instance_id for i in self.instances
                if i.state == "running" and i.profile == "idle" and i.group is None
                and PROTECT_TAG not in i.tag_map}

    def expected_tagged(self) -> set[str]:
        """Unprotected instances without `team`, whatever their state."""
        return {i.instance_id for i in self.instances
                if "team" not in i.tag_map and PROTECT_TAG not in i.tag_map}

    def floor(self) -> Counter[str]:
        """The fewest calls one cold cycle can make, by operation: one AssumeRole per
        account (and one GetCallerIdentity), per scope one DescribeInstances per 1,000, one
        GetMetricData per 500 queries (`QUERIES_PER_GPU_INSTANCE`; an hour and a settling
        span of 5-minute points fits one call's 100,800 datapoints), one Auto Scaling read where
        groups are, one spot price read (the cost of spot instances; what spot would save on the
        others); per scope that acts, one
        re-check and one call per action kind (stop, whose answer gives the states; tag); the GPU
        types once (100 a call)."""
        calls: Counter[str] = Counter()
        calls["STS.GetCallerIdentity"] += 1
        calls["STS.AssumeRole"] += len(self.accounts)
        calls["EC2.DescribeInstanceTypes"] += -(-len({i.itype for i in self.instances}) // 100)
        stopped, tagged = self.expected_stopped(), self.expected_tagged()
        for members in self.by_scope.values():
            calls["EC2.DescribeInstances"] += -(-len(members) // 1000)
            queries = QUERIES_PER_GPU_INSTANCE * sum(
                1 for i in members if i.gpu and i.state == "running")
            if queries:
                calls["CloudWatch.GetMetricData"] += -(-queries // 500)
            if any(i.group for i in members):
                calls["AutoScaling.DescribeAutoScalingGroups"] += 1
            if any(i.state == "running" or i.spot for i in members):
                calls["EC2.DescribeSpotPriceHistory"] += 1
            stops = sum(1 for i in members if i.instance_id in stopped)
            tags = sum(1 for i in members if i.instance_id in tagged)
            if stops or tags:
                calls["EC2.DescribeInstances"] += -(-(stops + tags) // 1000)
            if stops:
                calls["EC2.StopInstances"] += -(-stops // 1000)  # (its answer: the states)
            if tags:
                calls["EC2.CreateTags"] += -(-tags // 1000)
        return calls


def account_ids(n: int) -> list[str]:
    return [str(FIRST_ACCOUNT + k * 7919) for k in range(n)]


def generate(instances: int, accounts: int, regions: list[str], now: datetime,
             seed: int = 22) -> Fleet:
    """`instances` over `accounts` x `regions`, accounts sized 1/(k+1)^0.8."""
    rng = random.Random(seed)
    ids = account_ids(accounts)
    weights = [1 / (k + 1) ** 0.8 for k in range(accounts)]
    total = sum(weights)
    sizes = [max(1, int(instances * w / total)) for w in weights]
    sizes[0] += instances - sum(sizes)  # the rounding goes to the largest account
    profiles = [p for p, _ in PROFILES]
    profile_weights = [w for _, w in PROFILES]
    out: list[FleetInstance] = []
    index = 0
    for account, size in zip(ids, sizes, strict=True):
        groups = [f"asg-{account}-{g}" for g in range(3)]
        for k in range(size):
            region = regions[k % len(regions)]
            gpu = rng.random() < 0.7
            itype = rng.choice(GPU_TYPES if gpu else CPU_TYPES)
            tags = [("Name", f"host-{index}")]
            if rng.random() < 0.8:
                tags.append(("team", rng.choice(("ml-research", "vision", "nlp", "platform"))))
            if rng.random() < 0.6:
                tags.append(("owner", f"user{index % 97}@example.com"))
            if rng.random() < 0.03:
                tags.append((PROTECT_TAG, "true"))
            group = rng.choice(groups) if rng.random() < 0.1 else None
            if group:
                tags.append((ASG_TAG, group))
            out.append(FleetInstance(
                index=index, instance_id=f"i-{0x0a0000000000000 + index:017x}",
                account=account, region=region, zone=f"{region}{'abc'[index % 3]}",
                itype=itype, state="stopped" if rng.random() < 0.08 else "running",
                spot=rng.random() < 0.2,
                profile=rng.choices(profiles, profile_weights)[0] if gpu else "cpu",
                tags=tuple(tags), group=group))
            index += 1
    return Fleet(now=now, accounts=ids, regions=regions, instances=out)


def gpu_utilization(inst: FleetInstance, at: datetime, now: datetime) -> float | None:
    """The agent's average GPU utilization (%) for the period starting `at`; None: no point."""
    if inst.profile in ("no-agent", "cpu") or inst.state != "running":
        return None
    if not now - HISTORY <= at < now + LATER:
        return None
    jitter = ((inst.index * 2654435761 + int(at.timestamp()) // 60 * 40503) % 1000) / 1000
    busy = inst.profile == "busy" or (inst.profile == "went-idle"
                                      and at < now - timedelta(minutes=20))
    return round(35 + 60 * jitter, 2) if busy else round(2 * jitter, 2)


def host_cpu(inst: FleetInstance, at: datetime, now: datetime) -> float | None:
    """EC2's CPUUtilization (%) for the period starting `at`."""
    if inst.state != "running" or not now - HISTORY <= at < now + LATER:
        return None
    return round(5 + ((inst.index * 97 + int(at.timestamp()) // 300) % 40), 2)


def spot_price(itype: str, zone: str) -> float:
    base = {"p5.48xlarge": 18.0, "p4d.24xlarge": 9.0, "g5.12xlarge": 2.1}.get(itype, 0.4)
    return round(base * (1 + (sum(map(ord, zone)) % 7) / 50), 4)
