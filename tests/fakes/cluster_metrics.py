"""A GPU cluster's metrics, written as dcgm-exporter and kube-state-metrics write them.

Shapes, from each exporter's own source (not guessed):

* dcgm-exporter (NVIDIA/dcgm-exporter, internal/pkg/rendermetrics/render_metrics.go):
  `NAME{gpu="0",UUID="GPU-...",pci_bus_id="...",device="nvidia0",modelName="..."` then, on
  a MIG instance, `,GPU_I_PROFILE="3g.20gb",GPU_I_ID="1"`, then `,Hostname="..."` (newer
  releases: `hostname`), then the label fields (`DCGM_FI_DRIVER_VERSION`), then the
  Kubernetes attributes in key order (`container`, `namespace`, `pod`, `pod_uid`), and the
  value as DCGM gives it (integers for DEV_* gauges, ratios for PROF_*). HELP texts are
  etc/default-counters.csv's and etc/dcp-metrics-included.csv's.
* kube-state-metrics (kubernetes/kube-state-metrics, internal/store/*.go and
  docs/metrics/): pod metrics' labels start `namespace, pod, uid`; resource names are
  sanitised (`nvidia.com/gpu` -> `nvidia_com_gpu`, unit `integer`); a pod without owner
  has empty owner labels; `kube_pod_status_phase` has one series per phase, 1 for the
  current one.

* cAdvisor, as the kubelet serves it at /metrics/cadvisor (google/cadvisor,
  metrics/prometheus.go; kubelet adds `container`, `namespace`, `pod`):
  `container_cpu_usage_seconds_total{container,cpu="total",id,image,name,namespace,pod}`,
  a counter of CPU seconds, one series per container, one for the pod's own cgroup with
  `container=""` (the sum: a query that keeps it counts twice) and one for the pause
  container `POD`.

`Cluster.exposition()` is what a scrape of each exporter returns now; `openmetrics()` is
the same series over a span of minutes with timestamps, for `promtool tsdb
create-blocks-from openmetrics` (hours of history in a real Prometheus in a second).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

DRIVER = "550.54.15"
HELP = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_PROF_SM_ACTIVE": ("gauge", "The ratio of cycles an SM has at least 1 warp "
                               "assigned."),
    "kube_node_info": ("gauge", "[STABLE] Information about a cluster node."),
    "kube_node_labels": ("gauge", "[STABLE] Kubernetes labels converted to Prometheus labels."),
    "kube_node_status_allocatable": ("gauge", "[STABLE] The allocatable for different "
                                     "resources of a node that are available for scheduling."),
    "kube_pod_info": ("gauge", "[STABLE] Information about pod."),
    "kube_pod_owner": ("gauge", "[STABLE] Information about the Pod's owner."),
    "kube_pod_labels": ("gauge", "[STABLE] Kubernetes labels converted to Prometheus labels."),
    "kube_pod_status_phase": ("gauge", "[STABLE] The pods current phase."),
    "kube_pod_container_resource_requests": (
        "gauge", "The number of requested request resource by a container. It is "
        "recommended to use the kube_pod_resource_requests metric exposed by kube-scheduler "
        "instead, as it is more precise."),
    "kube_namespace_labels": ("gauge", "[STABLE] Kubernetes labels converted to Prometheus "
                              "labels."),
    "kube_replicaset_owner": ("gauge", "[STABLE] Information about the ReplicaSet's owner."),
    "kube_job_owner": ("gauge", "[STABLE] Information about the Job's owner."),
    "container_cpu_usage_seconds_total": ("counter", "Cumulative cpu time consumed in "
                                          "seconds."),
}
PHASES = ("Pending", "Succeeded", "Failed", "Unknown", "Running")

# A GPU's activity at minute m of the scenario: (SM active 0-1, util %, FB used MiB)
Activity = Callable[[int], tuple[float, float, float]]


def idle(fb_mib: float = 20480.0) -> Activity:
    return lambda m: (0.0, 0.0, fb_mib)


def training(level: float = 0.7, fb_mib: float = 61000.0) -> Activity:
    return lambda m: (min(1.0, level + 0.1 * math.sin(m / 7)), 97.0 + (m % 3), fb_mib)


def busy_then_idle(until: int, fb_mib: float = 30000.0) -> Activity:
    return lambda m: (0.62, 95.0, fb_mib) if m < until else (0.0, 0.0, fb_mib)


@dataclass
class Gpu:
    index: int
    uuid: str
    model: str
    activity: Activity = field(default_factory=idle)
    mig_profile: str = ""
    mig_id: str = ""
    holder: str = ""  # "namespace/pod/container", where a pod holds it

    def labels(self, node: str, hostname_label: str) -> str:
        out = (f'gpu="{self.index}",UUID="{self.uuid}",pci_bus_id="00000000:{16 + self.index:02X}'
               f':00.0",device="nvidia{self.index}",modelName="{self.model}"')
        if self.mig_profile:
            out += f',GPU_I_PROFILE="{self.mig_profile}",GPU_I_ID="{self.mig_id}"'
        out += f',{hostname_label}="{node}",DCGM_FI_DRIVER_VERSION="{DRIVER}"'
        if self.holder:
            ns, pod, container = self.holder.split("/")
            out += f',container="{container}",namespace="{ns}",pod="{pod}"'
        return out


@dataclass
class Node:
    name: str
    provider_id: str
    cpu: float
    memory: float
    gpus: list[Gpu]
    allocatable: dict[str, float] = field(default_factory=dict)  # GPU resources
    labels: dict[str, str] = field(default_factory=dict)  # KSM names: label_...


@dataclass
class PodSpec:
    namespace: str
    name: str
    node: str
    owner_kind: str = ""
    owner_name: str = ""
    requests: dict[str, float] = field(default_factory=dict)  # KSM resource -> value
    labels: dict[str, str] = field(default_factory=dict)
    phase: str = "Running"
    start: int = 0  # the scenario minute it starts running (Pending before)
    uid: str = ""
    cpu: Callable[[int], float] | None = None  # cores its container uses at minute m

    def __post_init__(self) -> None:
        digest = hashlib.sha1(f"{self.namespace}/{self.name}".encode()).hexdigest()
        self.uid = self.uid or (f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-"
                                f"{digest[16:20]}-{digest[20:32]}")


@dataclass
class Cluster:
    nodes: list[Node]
    pods: list[PodSpec]
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    replicasets: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    jobs: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    hostname_label: str = "Hostname"
    with_sm_active: bool = True  # DCP metrics (dcp-metrics-included.csv) exported

    def dcgm(self, m: int) -> Iterator[tuple[str, str, float]]:
        """(metric, labels, value) of every GPU at scenario minute m."""
        for node in self.nodes:
            for gpu in node.gpus:
                sm, util, fb = gpu.activity(m)
                labels = gpu.labels(node.name, self.hostname_label)
                if self.with_sm_active:
                    yield "DCGM_FI_PROF_SM_ACTIVE", labels, round(sm, 6)
                yield "DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, round(min(1.0, sm * 1.3), 6)
                if not gpu.mig_profile:  # DCGM has no GPU_UTIL for a MIG instance
                    yield "DCGM_FI_DEV_GPU_UTIL", labels, util
                yield "DCGM_FI_DEV_FB_USED", labels, fb

    def ksm(self, m: int) -> Iterator[tuple[str, str, float]]:
        for node in self.nodes:
            yield ("kube_node_info", f'node="{node.name}",kernel_version="6.1.0",os_image='
                   f'"Amazon Linux 2",container_runtime_version="containerd://1.7.11",'
                   f'kubelet_version="v1.29.0",kubeproxy_version="deprecated",'
                   f'provider_id="{node.provider_id}",pod_cidr="",system_uuid="ec2-{node.name}",'
                   f'internal_ip="10.0.0.1"', 1)
            if node.labels:
                yield "kube_node_labels", f'node="{node.name}",' + _kv(node.labels), 1
            for res, unit, value in (("cpu", "core", node.cpu), ("memory", "byte", node.memory),
                                     *((r, "integer", v) for r, v in node.allocatable.items())):
                yield ("kube_node_status_allocatable",
                       f'node="{node.name}",resource="{res}",unit="{unit}"', value)
        for ns, labels in self.namespaces.items():
            yield "kube_namespace_labels", f'namespace="{ns}"' + (
                "," + _kv(labels) if labels else ""), 1
        for (ns, rs), (kind, name) in self.replicasets.items():
            yield ("kube_replicaset_owner", f'namespace="{ns}",replicaset="{rs}",owner_kind='
                   f'"{kind}",owner_name="{name}",owner_is_controller="true"', 1)
        for (ns, job), (kind, name) in self.jobs.items():
            yield ("kube_job_owner", f'namespace="{ns}",job_name="{job}",owner_kind="{kind}",'
                   f'owner_name="{name}",owner_is_controller="{"true" if kind else ""}"', 1)
        for p in self.pods:
            base = f'namespace="{p.namespace}",pod="{p.name}",uid="{p.uid}"'
            running = m >= p.start
            phase = p.phase if running else "Pending"
            node = p.node if running else ""
            yield ("kube_pod_info", f'{base},host_ip="10.0.0.1",pod_ip="10.1.0.9",node="{node}",'
                   f'created_by_kind="{p.owner_kind}",created_by_name="{p.owner_name}",'
                   f'priority_class="",host_network="false"', 1)
            yield ("kube_pod_owner", f'{base},owner_kind="{p.owner_kind}",owner_name='
                   f'"{p.owner_name}",owner_is_controller="{"true" if p.owner_kind else ""}"', 1)
            yield "kube_pod_labels", base + ("," + _kv(p.labels) if p.labels else ""), 1
            for each in PHASES:
                yield "kube_pod_status_phase", f'{base},phase="{each}"', int(each == phase)
            for res, value in p.requests.items():
                unit = {"cpu": "core", "memory": "byte"}.get(res, "integer")
                yield ("kube_pod_container_resource_requests",
                       f'{base},container="main",node="{node}",resource="{res}",'
                       f'unit="{unit}"', value)

    def cadvisor(self, m: float) -> Iterator[tuple[str, str, float]]:
        """Each running pod's CPU seconds so far, at minute m (a fraction counts: a live
        scrape's counters grow by the second), for its own container, the pause container,
        and the pod's cgroup that sums them."""
        for p in self.pods:
            if p.cpu is None or m < p.start:
                continue
            whole = int(m)
            used = (sum(p.cpu(k) * 60 for k in range(p.start, whole))
                    + p.cpu(whole) * (m - whole) * 60)
            cgroup = f"/kubepods/burstable/pod{p.uid}"
            for container, seconds in (("main", used), ("POD", 0.01 * (m - p.start)),
                                       ("", used + 0.01 * (m - p.start))):
                cid = hashlib.sha1(f"{p.uid}/{container}".encode()).hexdigest()
                path = f"{cgroup}/{cid}" if container else cgroup
                image = {"main": "registry.example.com/ml/job:1.4", "POD":
                         "registry.k8s.io/pause:3.9", "": ""}[container]
                yield ("container_cpu_usage_seconds_total",
                       f'container="{container}",cpu="total",id="{path}",image="{image}",'
                       f'name="{cid[:12] if container else ""}",namespace="{p.namespace}",'
                       f'pod="{p.name}"', round(seconds, 3))

    def exposition(self, exporter: str, m: float = 0) -> str:
        """One scrape of `exporter` ("dcgm", "ksm" or "cadvisor") at minute m, in the text
        format."""
        if exporter == "cadvisor":
            return "".join(_families(self.cadvisor(m), None))
        whole = int(m)
        return "".join(_families(self.dcgm(whole) if exporter == "dcgm" else self.ksm(whole),
                                 None))

    def openmetrics(self, minutes: int, start_s: int) -> str:
        """Every series, once a minute for `minutes` minutes from `start_s`, as OpenMetrics."""
        by_family: dict[str, dict[str, list[tuple[int, float]]]] = {}
        for m in range(minutes):
            t = start_s + 60 * m
            for metric, labels, value in (*self.dcgm(m), *self.ksm(m), *self.cadvisor(m)):
                by_family.setdefault(metric, {}).setdefault(labels, []).append((t, value))
        out = []
        for metric, series in by_family.items():
            kind, text = HELP[metric]
            # an OpenMetrics counter's family is named without its samples' _total
            family = metric.removesuffix("_total") if kind == "counter" else metric
            out.append(f"# HELP {family} {text}\n# TYPE {family} {kind}\n")
            for labels, points in series.items():
                out.extend(f"{metric}{{{labels}}} {_num(v)} {t}\n" for t, v in points)
        out.append("# EOF\n")
        return "".join(out)


def _families(samples: Iterator[tuple[str, str, float]], at: int | None) -> Iterator[str]:
    grouped: dict[str, list[str]] = {}
    for metric, labels, value in samples:
        grouped.setdefault(metric, []).append(f"{metric}{{{labels}}} {_num(value)}\n")
    for metric, lines in grouped.items():
        kind, text = HELP[metric]
        yield f"# HELP {metric} {text}\n# TYPE {metric} {kind}\n"
        yield from lines


def _kv(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
