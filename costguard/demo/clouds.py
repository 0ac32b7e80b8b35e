"""`costguard demo --cloud aws|gcp`: the demo against the real provider code and a local fake.

`cloud_providers(cloud, clock, hours=...)` starts a seeded fake cloud (moto in-process for
AWS; the Compute REST + Monitoring gRPC fakes on 127.0.0.1 for GCP), fills its metrics for the
whole simulated window (from 90 minutes before `clock.now()` to `hours` after it, because the
demo's clock moves forward through that window), and yields the real `AwsProvider` or
`GcpProvider` pointed at it. Nothing here contacts a cloud.

    clock = ManualClock(end - timedelta(hours=6))
    with cloud_providers("gcp", clock, hours=6) as providers:
        run_demo(settings, console, hours=6, providers=providers, clock=clock)
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from costguard.clock import Clock, ManualClock
from costguard.errors import ConfigError
from costguard.providers.base import Provider

if TYPE_CHECKING:
    from costguard.demo.gcp_fake.server import FakeGcp

CLOUDS = ("aws", "gcp")
DEFAULT_CLOUD_HOURS = 6  # cloud fakes answer more slowly than the in-memory sim: 6 h, not 48
LEAD_IN = timedelta(minutes=90)  # metrics before the first cycle, so it can judge idleness

GCP_PROJECTS = ("ml-demo-research", "ml-demo-prod")
GCP_ZONES = ("us-central1-a", "europe-west4-a")
# machine type, accelerator, GPUs, DCGM SM activity exported (Ops Agent dcgm receiver)
_GCP_SHAPES = (
    ("a2-highgpu-1g", "nvidia-tesla-a100", 1, True),
    ("a2-highgpu-2g", "nvidia-tesla-a100", 2, True),
    ("g2-standard-8", "nvidia-l4", 1, True),
    ("n1-standard-8", "nvidia-tesla-t4", 1, False),
)
_GCP_MODELS = {"nvidia-tesla-a100": "NVIDIA A100-SXM4-40GB", "nvidia-l4": "NVIDIA L4",
               "nvidia-tesla-t4": "Tesla T4"}
_TEAMS = ("research", "vision", "nlp", "recsys")
# idle: nothing runs; tiny-kernels: util_gpu ~12 % while SMs idle (only SM activity sees it);
# went-idle: busy, then idle for the last 2 hours of the window; no-agent: no metrics at all
_GCP_PROFILES = (("idle", 25), ("tiny-kernels", 10), ("busy", 45), ("went-idle", 12),
                 ("no-agent", 8))


def _window(clock: Clock, hours: float) -> tuple[datetime, datetime]:
    start = clock.now().replace(second=0, microsecond=0)
    return start - LEAD_IN, start + timedelta(hours=hours, minutes=10)


@contextmanager
def cloud_providers(
    cloud: str, clock: Clock, *, hours: float = DEFAULT_CLOUD_HOURS, instances: int = 24
) -> Iterator[dict[str, Provider]]:
    """A fake `cloud` ("aws" or "gcp") seeded with a small GPU fleet, and its provider."""
    if cloud == "aws":
        with _aws(clock, hours, instances) as providers:
            yield providers
    elif cloud == "gcp":
        with _gcp(clock, hours, instances) as providers:
            yield providers
    else:
        raise ConfigError(f"unknown demo cloud {cloud!r}: use one of sim, {', '.join(CLOUDS)}")


@contextmanager
def _aws(clock: Clock, hours: float, instances: int) -> Iterator[dict[str, Provider]]:
    from costguard.demo.aws_fleet import start_demo_fleet
    from costguard.providers.aws import AwsProvider

    first, last = _window(clock, hours)
    # The fleet seeds metrics that end at its clock's "now": give it the window's end.
    with start_demo_fleet(ManualClock(last), n=instances,
                          minutes=int((last - first).total_seconds() // 60)) as fleet:
        yield {"aws": AwsProvider(fleet.settings, clock=clock)}


@contextmanager
def _gcp(clock: Clock, hours: float, instances: int) -> Iterator[dict[str, Provider]]:
    from costguard.demo.gcp_fake.server import FakeGcp
    from costguard.providers.gcp import GcpProvider

    with FakeGcp() as fake:
        seed_gcp_fleet(fake, clock, hours=hours, instances=instances)
        provider = GcpProvider(fake.settings(projects=list(GCP_PROJECTS)), clock=clock)
        try:
            yield {"gcp": provider}
        finally:
            provider.close()


def seed_gcp_fleet(fake: FakeGcp, clock: Clock, *, hours: float, instances: int,
                   seed: int = 11) -> dict[str, str]:
    """Add `instances` VMs (about two thirds with GPUs) and per-minute GPU series covering the
    demo window to a running `FakeGcp`; returns instance id -> GPU profile."""
    from costguard.providers.gcp.metrics import SM_V2, UTIL

    rng = random.Random(seed)
    first, last = _window(clock, hours)
    went_idle_at = last - timedelta(hours=2)
    profiles: dict[str, str] = {}
    for i in range(instances):
        project = GCP_PROJECTS[i % len(GCP_PROJECTS)]
        zone = GCP_ZONES[(i // 2) % len(GCP_ZONES)]
        team = rng.choice(_TEAMS)
        labels = {"team": team, "owner": f"{team}-lead"} if rng.random() < 0.8 else {}
        spot = rng.random() < 0.3
        if rng.random() < 0.35:
            fake.compute.add_instance(project, zone, f"cpu-{i}", "n2-standard-8",
                                      labels=labels, spot=spot,
                                      created=first - timedelta(days=2))
            continue
        machine, accelerator, count, dcgm = rng.choice(_GCP_SHAPES)
        vm = fake.compute.add_instance(project, zone, f"gpu-{i}", machine, labels=labels,
                                       accelerators=[(accelerator, count)], spot=spot,
                                       created=first - timedelta(days=rng.randint(1, 9)))
        profile = rng.choices([p for p, _ in _GCP_PROFILES], [w for _, w in _GCP_PROFILES])[0]
        profiles[str(vm.id)] = profile
        if profile == "no-agent":
            continue
        for gpu in range(count):
            util, sm = [], []
            t = first + timedelta(seconds=30)
            while t < last:
                busy = profile == "busy" or (profile == "went-idle" and t < went_idle_at)
                u = rng.uniform(35, 97) if busy else (
                    rng.uniform(10, 14) if profile == "tiny-kernels" else rng.uniform(0, 2))
                util.append((t, round(u, 1)))
                sm.append((t, round(u / 100 * (rng.uniform(0.6, 0.9) if busy else 0.05), 4)))
                t += timedelta(minutes=1)
            model = _GCP_MODELS[accelerator]
            for metric, points in ((UTIL, util), (SM_V2, sm)) if dcgm else ((UTIL, util),):
                fake.monitoring.add_gpu_series(project, metric, str(vm.id), points, zone=zone,
                                               gpu_number=gpu, model=model)
    profiles.update(seed_tpu_nodes(fake, first, last))
    return profiles


# Cloud TPU nodes beside the VMs, idle the whole window: a single-host v5e node (stopped as
# an idle GPU VM is) and a v5e slice of four hosts (one unit: reported, never stopped)
TPU_NODES = (("tpu-v5e-dev", "v5litepod-8", 1), ("tpu-v5e-slice", "v5litepod-16", 4))


def seed_tpu_nodes(fake: FakeGcp, first: datetime, last: datetime) -> dict[str, str]:
    """Add `TPU_NODES` (team nlp) with each chip's TensorCore idle duration growing minute by
    minute over [first, last); returns node id -> "idle"."""
    from costguard.providers.gcp.tpu_metrics import IDLE

    project, zone = GCP_PROJECTS[0], GCP_ZONES[0]
    out = {}
    for name, accelerator_type, hosts in TPU_NODES:
        node = fake.compute.add_tpu_node(project, zone, name, accelerator_type, hosts=hosts,
                                         labels={"team": "nlp", "owner": "nlp-lead"},
                                         created=first - timedelta(days=2))
        out[str(node.id)] = "idle"
        minutes = int((last - first).total_seconds() // 60)
        points = [(first + timedelta(minutes=m, seconds=30), 3600 + 60 * m)
                  for m in range(minutes)]
        for worker in range(hosts):
            for chip in range(8 if hosts == 1 else 4):
                fake.monitoring.add_tpu_series(project, IDLE, name, points, zone=zone,
                                               worker=worker, chip=chip, integer=True)
    return out
