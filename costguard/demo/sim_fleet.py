"""What the simulated cloud is made of: its instance types and its hosts (an instance, how
its GPUs behave, its disks and history). Shared by the plain fleet (sim.py) and the managed
groups (sim_groups.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from costguard.model import Instance, InstanceState

# type: (gpu count, gpu model). Prices: the shipped AWS on-demand table
# (providers/aws/data/ec2_gpu_prices.json), see sim_price(); GPU memory: AWS's own figure
# for the type (gpu_memory_mib), so the simulated NVML and the recommendations agree on it
SIM_TYPES: dict[str, tuple[int, str | None]] = {
    "p5.48xlarge": (8, "H100"),
    "p4d.24xlarge": (8, "A100"),
    "p3.2xlarge": (1, "V100"),
    "g5.xlarge": (1, "A10G"),
    "g5.12xlarge": (4, "A10G"),
    "g6.xlarge": (1, "L4"),
    "g4dn.xlarge": (1, "T4"),
    "m5.large": (0, None),
    "c5.xlarge": (0, None),
    "r5.2xlarge": (0, None),
}


def gpu_memory_mib(instance_type: str) -> int | None:
    """One GPU's memory as AWS lists it for the type (DescribeInstanceTypes' GpuInfo, the
    shipped gpu_types.json): the A10G's 22,888 MiB, not a round 24 GiB."""
    from costguard.recommend.shapes import aws_shapes

    shape = aws_shapes().get(instance_type)
    return shape.gpu_memory_mib if shape is not None and SIM_TYPES[instance_type][0] else None


@dataclass
class SimHost:
    instance: Instance
    profile: str
    busy_until: datetime | None = None  # for "finishes"
    stopped_at: datetime | None = None
    started_at: datetime | None = None
    disk_gib: int = 200  # attached block storage: still billed while the instance is stopped
    snapshots: list[str] = field(default_factory=list)
    history: list[tuple[datetime, InstanceState]] = field(default_factory=list)
    gpu_phases: tuple[str, ...] | None = None  # per GPU, where they differ (sim_hosts)
    host_cpu: float | None = None  # host CPU busy %, where not the phase's (sim_hosts)
    host_mem_gib: float | None = None
    host_disk_bps: float | None = None  # disk bytes a second, where the host moves data
    disk_until: datetime | None = None  # ... until then
