"""What costguard knows of a cluster's GPU pods: plain values, built by `k8s/read.py`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from costguard.minutes import Reading

# A MIG profile as the device plugin names its resource (`nvidia.com/mig-3g.40gb`, sanitised
# by KSM to `nvidia_com_mig_3g_40gb`) and dcgm-exporter its `GPU_I_PROFILE` (`3g.40gb`).
_MIG = re.compile(r"^(?:nvidia_com_mig_)?(\d+)g[._](\d+)gb(?:[+._].*)?$")
_KSM_CHARS = re.compile(r"[^a-zA-Z0-9_]")
# GPUs whose MIG slices are fourths (A30: 1g.6gb, 2g.12gb, 4g.24gb); every other MIG GPU
# (A100, H100, H200, B200) is cut in sevenths
_QUARTER_SLICE_GB = {6, 12, 24}


def mig_share(profile: str) -> float | None:
    """The share of one GPU a MIG profile is: its compute slices over the GPU's (7, or 4 on
    an A30, whose profiles are the only ones of 6, 12 and 24 GB). None: not a MIG profile."""
    found = _MIG.match(profile)
    if found is None:
        return None
    slices, gb = int(found.group(1)), int(found.group(2))
    whole = 4 if gb in _QUARTER_SLICE_GB and gb // slices == 6 else 7
    return min(1.0, slices / whole)


def gpu_resource_share(resource: str) -> float | None:
    """One unit of a KSM resource name as a share of a GPU: `nvidia_com_gpu` is 1, a MIG
    resource its slices' share, anything else None."""
    if resource == "nvidia_com_gpu":
        return 1.0
    if resource.startswith("nvidia_com_mig_"):
        return mig_share(resource)
    return None


def ksm_name(name: str) -> str:
    """A Kubernetes name as KSM writes it in a label or resource (`nvidia.com/gpu` ->
    `nvidia_com_gpu`)."""
    return _KSM_CHARS.sub("_", name)


def api_resource_share(name: str) -> float | None:
    """`gpu_resource_share` of a resource as the API names it (`nvidia.com/gpu`,
    `nvidia.com/mig-3g.20gb`)."""
    return gpu_resource_share(ksm_name(name))


@dataclass(frozen=True, order=True)
class PodKey:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Workload:
    """What owns a pod and would recreate it: a Deployment (through its ReplicaSet), a
    StatefulSet, a Job or the CronJob that made it, a DaemonSet... or the pod itself."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class Device:
    """One GPU, or one MIG instance of a GPU, as dcgm-exporter names it."""

    uuid: str
    gpu: str  # the GPU's index on its node
    model: str
    node: str  # dcgm-exporter's Hostname: the node's name under the GPU Operator
    mig_profile: str = ""
    mig_id: str = ""


@dataclass
class Requests:
    gpus: float = 0.0  # in GPUs: a MIG slice counts as its share
    gpu_units: int = 0  # devices asked for: whole GPUs plus MIG slices
    gpu_resource: str = ""  # nvidia.com/gpu, nvidia.com/mig-1g.10gb...
    cpu: float = 0.0  # cores
    memory: float = 0.0  # bytes


@dataclass
class Pod:
    key: PodKey
    node: str = ""
    workload: Workload | None = None
    labels: dict[str, str] = field(default_factory=dict)
    requests: Requests = field(default_factory=Requests)
    # the steps (unix seconds) the pod ran at, with what it requested then
    steps: dict[float, Requests] = field(default_factory=dict)
    devices: dict[tuple[str, str], Device] = field(default_factory=dict)  # (uuid, mig_id)
    readings: list[Reading] = field(default_factory=list)  # gpu_index: devices' order
    cpu_used: dict[float, float] = field(default_factory=dict)  # step start -> cores (cAdvisor)

    @property
    def owner(self) -> Workload:
        return self.workload or Workload("Pod", self.key.name)


@dataclass
class Node:
    name: str
    provider_id: str = ""
    gpus: float = 0.0  # allocatable, in GPUs (MIG slices by their share)
    cpu: float = 0.0
    memory: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    steps: set[float] = field(default_factory=set)  # when it existed


@dataclass
class ClusterRead:
    """A cluster over [start, end) at `step`: its nodes, the pods that requested GPUs, and
    what those GPUs did."""

    cluster: str
    start: datetime
    end: datetime
    step: timedelta
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[PodKey, Pod] = field(default_factory=dict)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    # GPUs dcgm-exporter reported with no pod holding them, per node
    free_devices: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    calls: int = 0
