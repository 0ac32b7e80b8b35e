"""The seeded ML/GPU EC2 fleet of shared/peers/c7n/fleet.py, buildable in-process or on a server.

`plan_fleet` draws exactly the same random sequence as the peer harness (same seed -> same
shape and counts), so costguard and Cloud Custodian are measured on the same fleet; a test
compares the two plans when shared/ is present. `build_fleet` differs from the peer's `build`
only in what it is given: a client factory (in-process `mock_aws` or a loopback moto server),
the metrics anchor time, and the CloudWatch agent dimension layout.

Usage from a benchmark::

    from tests.fakes.aws_fleet import build_fleet, plan_fleet, server_clients
    doc = build_fleet(server_clients("http://127.0.0.1:PORT"), plan_fleet(1000, REGIONS, SEED),
                      REGIONS, now)
"""

from __future__ import annotations

import collections
import datetime as dt
import ipaddress
import random
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import boto3
from botocore.config import Config

DEFAULT_REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "ap-southeast-1"]
DEFAULT_SEED = 20240611
GPU_TYPES = [("g5.xlarge", 35), ("g4dn.xlarge", 30), ("p3.2xlarge", 20), ("p4d.24xlarge", 15)]
CPU_TYPES = [("m5.large", 35), ("c5.xlarge", 30), ("t3.medium", 20), ("r5.2xlarge", 15)]
GPU_NAMES = {
    "g5.xlarge": "NVIDIA A10G",
    "g4dn.xlarge": "Tesla T4",
    "p3.2xlarge": "Tesla V100-SXM2-16GB",
    "p4d.24xlarge": "NVIDIA A100-SXM4-40GB",
}
TEAMS = ["ml-research", "ml-platform", "vision", "nlp", "recsys", "speech", "data-eng", "infra"]
GPU_PROFILES = [("idle", 26), ("went-idle", 4), ("recently-busy", 4), ("no-agent", 3), ("busy", 63)]
POINTS = 24  # 2 hours at 5-minute resolution
STEP = dt.timedelta(minutes=5)
GPU_METRIC_NS = "CWAgent"
GPU_METRIC = "nvidia_smi_utilization_gpu"
FALLBACK_AMI = "ami-12c6146b"  # moto's EXAMPLE_AMI_ID
CREDS = {
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "aws_session_token": "testing",
}

Layout = Literal["instance-id", "host", "mixed"]
ClientFor = Callable[[str, str], Any]  # (service, region) -> boto3 client


def _wchoice(rng: random.Random, pairs: Sequence[tuple[str, int]]) -> str:
    return rng.choices([p for p, _ in pairs], weights=[w for _, w in pairs], k=1)[0]


def _gpu_series(rng: random.Random, profile: str) -> list[float]:
    """24 values, index k = k*5 minutes ago (k=0 is now)."""
    out = []
    for k in range(POINTS):
        age_min = k * 5
        idle = age_min <= 65 if profile == "went-idle" else age_min >= 30
        if profile == "idle" or (profile in ("went-idle", "recently-busy") and idle):
            v = round(rng.uniform(0.0, 4.0), 2)
        elif profile in ("busy", "went-idle", "recently-busy"):
            v = round(rng.uniform(20.0, 98.0), 2)
        else:
            raise ValueError(profile)
        out.append(v)
    return out


def plan_fleet(n: int, regions: Sequence[str], seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """The peer's plan, draw for draw."""
    rng = random.Random(seed)
    specs: list[dict[str, Any]] = []
    for i in range(n):
        region = regions[i % len(regions)]
        gpu = rng.random() < 0.45
        itype = _wchoice(rng, GPU_TYPES if gpu else CPU_TYPES)
        r = rng.random()
        team = rng.choice(TEAMS) if r < 0.85 else None
        name_only = team is None and rng.random() < 0.66
        r = rng.random()
        protect = "true" if r < 0.08 else ("false" if r < 0.10 else None)
        spot = rng.random() < 0.35
        prestopped = rng.random() < 0.04
        profile = None
        if gpu and not prestopped:
            profile = _wchoice(rng, GPU_PROFILES)
        tags: list[tuple[str, str]] = []
        if team is not None or name_only:
            tags.append(("Name", f"{'gpu' if gpu else 'cpu'}-worker"))
        if team is not None:
            tags.append(("team", team))
        if protect is not None:
            tags.append(("costguard:protect", protect))
        cpu = [
            round(rng.uniform(0.5, 6.0) if profile in ("idle",) else rng.uniform(5.0, 90.0), 2)
            for _ in range(POINTS)
        ]
        gpu_vals = _gpu_series(rng, profile) if profile and profile != "no-agent" else None
        specs.append(
            {
                "idx": i,
                "region": region,
                "type": itype,
                "gpu": gpu,
                "team": team,
                "protect": protect,
                "spot": spot,
                "prestopped": prestopped,
                "profile": profile,
                "tags": tuple(tags),
                "cpu": cpu,
                "gpu_util": gpu_vals,
            }
        )
    return specs


def _chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def check_loopback(url: str) -> None:
    host = urllib.parse.urlparse(url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"refusing non-loopback endpoint {url!r} (moto must run on 127.0.0.1)")


def server_clients(endpoint: str) -> ClientFor:
    """Clients for a moto server on loopback."""
    check_loopback(endpoint)
    # moto serializes a 10,000-instance DescribeInstances page for minutes: no read timeout
    # short enough to give up on a loopback server that is merely slow
    cfg = Config(retries={"max_attempts": 3, "mode": "standard"}, read_timeout=900)

    def make(service: str, region: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service, region_name=region, endpoint_url=endpoint, config=cfg, **CREDS
        )

    return make


def mock_clients() -> ClientFor:
    """Clients for an active in-process `moto.mock_aws`."""

    def make(service: str, region: str) -> Any:
        return boto3.client(service, region_name=region, **CREDS)  # type: ignore[call-overload]

    return make


def _gpu_dims(spec: dict[str, Any], layout: Layout) -> list[dict[str, str]]:
    by_id = [{"Name": "InstanceId", "Value": spec["id"]}]
    by_host = [
        {"Name": "host", "Value": spec["private_dns"]},
        {"Name": "index", "Value": "0"},
        {"Name": "name", "Value": GPU_NAMES[spec["type"]]},
    ]
    if layout == "instance-id" or (layout == "mixed" and spec["idx"] % 2 == 0):
        return by_id
    return by_host


def build_fleet(
    client_for: ClientFor,
    specs: list[dict[str, Any]],
    regions: Sequence[str],
    now: dt.datetime,
    *,
    layout: Layout = "instance-id",
) -> dict[str, Any]:
    """Launch, tag, stop and feed metrics as the peer's `build` does; returns its expectation
    document (same keys as expected.json). `specs` gain `id` and `private_dns`."""
    now = now.replace(microsecond=0)
    for region in regions:
        ec2 = client_for("ec2", region)
        cw = client_for("cloudwatch", region)
        rs = [s for s in specs if s["region"] == region]
        groups: dict[tuple[str, bool], list[dict[str, Any]]] = collections.defaultdict(list)
        for s in rs:
            groups[(s["type"], s["spot"])].append(s)
        for (itype, spot), members in sorted(groups.items()):
            for part in _chunks(members, 500):
                kw: dict[str, Any] = {
                    "ImageId": FALLBACK_AMI,
                    "MinCount": len(part),
                    "MaxCount": len(part),
                    "InstanceType": itype,
                }
                if spot:
                    kw["InstanceMarketOptions"] = {
                        "MarketType": "spot",
                        "SpotOptions": {
                            "SpotInstanceType": "persistent",
                            "InstanceInterruptionBehavior": "stop",
                        },
                    }
                got = ec2.run_instances(**kw)["Instances"]
                assert len(got) == len(part), (len(got), len(part))
                for s, inst in zip(part, got, strict=True):
                    s["id"] = inst["InstanceId"]
                    s["private_dns"] = inst["PrivateDnsName"]
        tgroups: dict[tuple[tuple[str, str], ...], list[str]] = collections.defaultdict(list)
        for s in rs:
            if s["tags"]:
                tgroups[s["tags"]].append(s["id"])
        for tags, ids in sorted(tgroups.items()):
            for part in _chunks(ids, 500):
                ec2.create_tags(
                    Resources=list(part), Tags=[{"Key": k, "Value": v} for k, v in tags]
                )
        stop_ids = [s["id"] for s in rs if s["prestopped"]]
        for part in _chunks(stop_ids, 500):
            ec2.stop_instances(InstanceIds=list(part))
        cpu_data, gpu_data = [], []
        for s in rs:
            if s["prestopped"]:
                continue
            dims = [{"Name": "InstanceId", "Value": s["id"]}]
            gdims = _gpu_dims(s, layout) if s["gpu_util"] is not None else []
            for k in range(POINTS):
                ts = now - k * STEP
                cpu_data.append(
                    {
                        "MetricName": "CPUUtilization",
                        "Dimensions": dims,
                        "Timestamp": ts,
                        "Value": s["cpu"][k],
                        "Unit": "Percent",
                    }
                )
                if s["gpu_util"] is not None:
                    gpu_data.append(
                        {
                            "MetricName": GPU_METRIC,
                            "Dimensions": gdims,
                            "Timestamp": ts,
                            "Value": s["gpu_util"][k],
                            "Unit": "Percent",
                        }
                    )
        for ns, data in (("AWS/EC2", cpu_data), (GPU_METRIC_NS, gpu_data)):
            for part in _chunks(data, 1000):
                cw.put_metric_data(Namespace=ns, MetricData=list(part))
    return expectations(specs, regions, now)


def expectations(
    specs: list[dict[str, Any]], regions: Sequence[str], now: dt.datetime
) -> dict[str, Any]:
    """The id sets a correct tool must find (the peer's expected.json, same rules)."""
    expected: dict[str, dict[str, list[str]]] = {
        r: {
            "all": [],
            "missing_team": [],
            "idle_gpu_stop": [],
            "ondemand_gpu_running": [],
            "prestopped": [],
        }
        for r in regions
    }
    inst: dict[str, dict[str, Any]] = {}
    for s in specs:
        e = expected[s["region"]]
        e["all"].append(s["id"])
        last_hour = sum(s["gpu_util"][:12]) / 12.0 if s["gpu_util"] is not None else None
        if s["team"] is None:
            e["missing_team"].append(s["id"])
        if s["prestopped"]:
            e["prestopped"].append(s["id"])
        running = not s["prestopped"]
        if (
            running
            and s["gpu"]
            and last_hour is not None
            and last_hour < 5.0
            and s["protect"] != "true"
        ):
            e["idle_gpu_stop"].append(s["id"])
        if running and s["gpu"] and not s["spot"]:
            e["ondemand_gpu_running"].append(s["id"])
        row = {
            k: s[k]
            for k in ("region", "type", "gpu", "team", "protect", "spot", "prestopped", "profile")
        }
        row["gpu_last_hour_avg"] = None if last_hour is None else round(last_hour, 3)
        inst[s["id"]] = row
    return {
        "n": len(specs),
        "regions": list(regions),
        "metrics_anchor_utc": now.isoformat(),
        "counts": {r: {k: len(v) for k, v in e.items()} for r, e in expected.items()},
        "expected": expected,
        "instances": inst,
    }
