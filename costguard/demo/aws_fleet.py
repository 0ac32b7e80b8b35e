"""A small seeded EC2 fleet inside moto's in-process mock, for `costguard demo --cloud aws`.

moto is a test extra, so it is imported only when a demo fleet is started. Nothing here talks
to AWS: every boto3 call made while the fleet runs is answered in-process by moto.

    with start_demo_fleet(clock) as fleet:
        provider = AwsProvider(fleet.settings, clock=clock)
        provider.list_instances()
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import boto3

from costguard.clock import Clock
from costguard.errors import ConfigError
from costguard.providers.aws.metrics import GPU_MEM_TOTAL, GPU_MEM_USED, GPU_UTIL
from costguard.providers.aws.settings import AwsSettings

DEMO_REGIONS = ("us-east-1", "us-west-2")
DEMO_AMI = "ami-12c6146b"  # moto's EXAMPLE_AMI_ID
_GPU_TYPES = (
    ("g5.xlarge", "NVIDIA A10G", 23028),
    ("g4dn.xlarge", "Tesla T4", 15360),
    ("p4d.24xlarge", "NVIDIA A100-SXM4-40GB", 40960),
    ("g6e.xlarge", "NVIDIA L40S", 46068),
)
_CPU_TYPES = ("m5.large", "c5.xlarge", "t3.medium")
_TEAMS = ("ml-research", "vision", "nlp", "recsys")
_PROFILES = (("idle", 30), ("busy", 55), ("went-idle", 10), ("no-agent", 5))


@dataclass
class DemoFleet:
    settings: AwsSettings
    profiles: dict[str, str] = field(default_factory=dict)  # instance id -> GPU profile
    regions: tuple[str, ...] = DEMO_REGIONS


def _require_moto() -> Any:
    try:
        from moto import mock_aws
    except ImportError as exc:
        raise ConfigError(
            "the AWS demo needs moto (one of costguard's test extras): pip install "
            "'moto[server]>=5' into this environment, or `make venv` in a checkout"
        ) from exc
    return mock_aws


@contextmanager
def start_demo_fleet(
    clock: Clock, *, n: int = 40, seed: int = 7, minutes: int = 90
) -> Iterator[DemoFleet]:
    """Start moto's mock, seed `n` instances (about half with GPUs) and `minutes` of CloudWatch
    agent GPU metrics ending at `clock.now()`; the mock stops when the block ends."""
    mock_aws = _require_moto()
    from costguard.demo import aws_capacity, aws_studio

    # moto 5.2 lacks DescribeCapacityReservations and Studio's apps: served by fakes
    with mock_aws(), aws_capacity.serving(), aws_studio.serving():
        fleet = DemoFleet(settings=AwsSettings(regions=list(DEMO_REGIONS), max_workers=2))
        _seed(fleet, clock, n=n, seed=seed, minutes=minutes)
        _seed_notebook(fleet, clock, minutes=minutes)
        yield fleet


def _seed_notebook(fleet: DemoFleet, clock: Clock, *, minutes: int) -> None:
    """A SageMaker notebook instance left open, its GPU idle: what its agent publishes to
    CloudWatch by the notebook's ARN (`--publish-to cloudwatch`, docs/notebooks.md)."""
    region = fleet.regions[0]
    sm: Any = boto3.client("sagemaker", region_name=region)
    arn = sm.create_notebook_instance(
        NotebookInstanceName="research-notebook", InstanceType="ml.p3.2xlarge",
        RoleArn="arn:aws:iam::123456789012:role/service-role/AmazonSageMaker-ExecutionRole",
        Tags=[{"Key": "team", "Value": "research"},
              {"Key": "owner", "Value": "ana@example.com"}])["NotebookInstanceArn"]
    fleet.profiles[arn] = "idle"
    now = clock.now().replace(second=0, microsecond=0)
    dims = [{"Name": "InstanceId", "Value": arn}, {"Name": "index", "Value": "0"}]
    # the agent's layout: utilization, and memory in MiB (a V100's 16 GiB, 1.2 GiB held)
    datums = [{"MetricName": metric, "Dimensions": dims, "Value": value,
               "Timestamp": now - timedelta(minutes=ago)} for ago in range(minutes)
              for metric, value in ((GPU_UTIL, 0.0), (GPU_MEM_USED, 1229.0),
                                    (GPU_MEM_TOTAL, 16384.0))]
    cw: Any = boto3.client("cloudwatch", region_name=region)
    for start in range(0, len(datums), 1000):
        cw.put_metric_data(Namespace="CWAgent", MetricData=datums[start:start + 1000])


def _seed(fleet: DemoFleet, clock: Clock, *, n: int, seed: int, minutes: int) -> None:
    rng = random.Random(seed)
    now = clock.now().replace(second=0, microsecond=0)
    for r, region in enumerate(fleet.regions):
        ec2: Any = boto3.client("ec2", region_name=region)
        cw: Any = boto3.client("cloudwatch", region_name=region)
        datums: list[dict[str, Any]] = []
        for i in range(r, n, len(fleet.regions)):
            gpu = rng.random() < 0.5
            gpu_type = rng.choice(_GPU_TYPES) if gpu else None
            itype = gpu_type[0] if gpu_type else rng.choice(_CPU_TYPES)
            kwargs: dict[str, Any] = {}
            if rng.random() < 0.3:
                kwargs["InstanceMarketOptions"] = {
                    "MarketType": "spot",
                    "SpotOptions": {
                        "SpotInstanceType": "persistent",
                        "InstanceInterruptionBehavior": "stop",
                    },
                }
            (raw,) = ec2.run_instances(
                ImageId=DEMO_AMI, MinCount=1, MaxCount=1, InstanceType=itype, **kwargs
            )["Instances"]
            iid = raw["InstanceId"]
            tags = [{"Key": "Name", "Value": f"{'gpu' if gpu else 'cpu'}-worker-{i}"}]
            if rng.random() < 0.8:
                tags.append({"Key": "team", "Value": rng.choice(_TEAMS)})
            if rng.random() < 0.08:
                tags.append({"Key": "costguard:protect", "Value": "true"})
            ec2.create_tags(Resources=[iid], Tags=tags)
            if gpu_type is None:
                continue
            profile = rng.choices([p for p, _ in _PROFILES], [w for _, w in _PROFILES])[0]
            fleet.profiles[iid] = profile
            if profile == "no-agent":
                continue
            # Odd instances report like an agent without append_dimensions (host only).
            dims = [
                {"Name": "host", "Value": raw["PrivateDnsName"]},
                {"Name": "index", "Value": "0"},
                {"Name": "name", "Value": gpu_type[1]},
            ]
            if i % 2 == 0:
                dims.append({"Name": "InstanceId", "Value": iid})
            for ago in range(minutes):
                util = _util(rng, profile, ago)
                when = now - timedelta(minutes=ago)
                used = gpu_type[2] * (0.05 if util < 5 else rng.uniform(0.4, 0.9))
                for metric, value in (
                    (GPU_UTIL, util),
                    (GPU_MEM_USED, round(used)),
                    (GPU_MEM_TOTAL, gpu_type[2]),
                ):
                    datums.append(
                        {
                            "MetricName": metric,
                            "Dimensions": dims,
                            "Timestamp": when,
                            "Value": float(value),
                        }
                    )
        for start in range(0, len(datums), 1000):
            cw.put_metric_data(Namespace="CWAgent", MetricData=datums[start : start + 1000])


def _util(rng: random.Random, profile: str, minutes_ago: int) -> float:
    idle = profile == "idle" or (profile == "went-idle" and minutes_ago < 50)
    return round(rng.uniform(0.0, 3.0) if idle else rng.uniform(25.0, 97.0), 1)
