"""The demo's simulated GPU cluster: an EKS cluster of two p4d nodes, read as costguard reads
a real one (a `ClusterRead`, as k8s/read.py builds it from Prometheus) and acted on through
an API server held in memory (`SimKubeApi`, the calls k8s/api.py makes, with the same
resourceVersion rule). What the API holds decides what runs: a Deployment scaled to zero,
a suspended Job or a stopped Notebook has no pods from that minute on.

    research/Notebook notebook-ana         1 GPU   used for the first 3 hours, then left open
    serving/Deployment chat-infer          2 GPUs  traffic for the first 10 hours, then none
    research/CronJob nightly-train         4 GPUs  trains throughout
    vision/Deployment detector-train       8 GPUs  trains throughout (protected)
    kube-system/DaemonSet dcgm-exporter    no GPU  (never governed)
    one GPU no pod requests                        idle capacity
"""

from __future__ import annotations

import copy
import itertools
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from costguard.clock import Clock
from costguard.errors import ProviderError
from costguard.k8s.api import KubeObject
from costguard.k8s.model import ClusterRead, Device, Node, Pod, PodKey, Requests, Workload
from costguard.k8s.read import PodMinute, ksm_label, step_minutes
from costguard.k8s.settings import ApiSettings, ClusterSettings
from costguard.k8s.workloads import KUBEFLOW_STOPPED, REPLICAS_BEFORE

CLUSTER = "demo-eks"
GiB = 2**30
A100 = "NVIDIA A100-SXM4-40GB"


def cluster_settings() -> ClusterSettings:
    """The demo cluster's settings: never contacted (the source below stands in)."""
    return ClusterSettings(name=CLUSTER, prometheus_url="http://prometheus.demo.invalid:9090",
                           namespace_teams={"serving": "platform", "vision": "vision"},
                           owner_team="platform", api=ApiSettings(in_cluster=True))


def merge_patch(target: Any, patch: Any) -> Any:
    """`patch` applied to `target` as a JSON merge patch (RFC 7386: null removes a key), as
    the API server applies costguard's patches."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class SimKubeApi:
    """The cluster's objects in memory, with what each patch changed and when."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls = 0
        self._rv = itertools.count(100)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.stopped_at: dict[tuple[str, str], datetime] = {}  # (namespace, name) -> when

    def add(self, plural: str, ns: str, name: str, *, spec: dict[str, Any] | None = None,
            labels: dict[str, str] | None = None,
            owner: tuple[str, str] | None = None) -> None:
        meta: dict[str, Any] = {"name": name, "namespace": ns,
                                "resourceVersion": str(next(self._rv)),
                                "creationTimestamp": "2026-11-01T00:00:00Z",
                                "labels": labels or {}, "annotations": {}}
        if owner is not None:
            meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
        self.objects[(plural, ns, name)] = {"metadata": meta, "spec": spec or {}}

    def list(self, plural: str) -> list[KubeObject] | None:
        self.calls += 1
        return [KubeObject(p, copy.deepcopy(o)) for (p, _, _), o in sorted(self.objects.items())
                if p == plural]

    def get(self, plural: str, namespace: str, name: str) -> KubeObject | None:
        self.calls += 1
        found = self.objects.get((plural, namespace, name))
        return KubeObject(plural, copy.deepcopy(found)) if found is not None else None

    def patch(self, obj: KubeObject, body: dict[str, Any]) -> KubeObject:
        self.calls += 1
        key = (obj.plural, obj.namespace, obj.name)
        current = self.objects.get(key)
        if current is None:
            raise ProviderError("k8s", CLUSTER, f"patch {obj.plural} {obj.namespace}/"
                                f"{obj.name}: HTTP 404 (NotFound)")
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise ProviderError("k8s", CLUSTER, f"patch {obj.plural} {obj.namespace}/"
                                f"{obj.name}: HTTP 409 (Conflict) the object has been modified")
        new = merge_patch(current, body)
        new["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[key] = new
        if _stopped(obj.plural, new):
            self.stopped_at.setdefault((obj.namespace, obj.name), self.clock.now())
        else:
            self.stopped_at.pop((obj.namespace, obj.name), None)
        return KubeObject(obj.plural, copy.deepcopy(new))

    def delete_pod(self, pod: KubeObject) -> None:
        self.calls += 1
        self.objects.pop(("pods", pod.namespace, pod.name), None)
        self.stopped_at.setdefault((pod.namespace, pod.name), self.clock.now())

    def close(self) -> None:
        return None


def _stopped(plural: str, body: dict[str, Any]) -> bool:
    spec, ann = body.get("spec") or {}, (body.get("metadata") or {}).get("annotations") or {}
    if plural in ("deployments", "statefulsets"):
        return spec.get("replicas") == 0 and REPLICAS_BEFORE in ann
    if plural in ("jobs", "cronjobs"):
        return spec.get("suspend") is True
    if plural == "notebooks":
        return KUBEFLOW_STOPPED in ann
    return False


# (namespace, pod, workload as Prometheus names it, the object stopping it, node, GPUs,
#  cores, GiB, team label, activity: hour since the demo began -> SM activity 0-1)
_PODS: list[tuple[str, str, Workload, str, str, list[int], float, float, str, str]] = [
    ("research", "notebook-ana-0", Workload("StatefulSet", "notebook-ana"), "notebook-ana",
     "a", [0], 8, 96, "research", "morning"),
    ("serving", "chat-infer-6b9d4-x2k8p", Workload("Deployment", "chat-infer"), "chat-infer",
     "a", [1], 8, 64, "", "daytime"),
    ("serving", "chat-infer-6b9d4-q7m3z", Workload("Deployment", "chat-infer"), "chat-infer",
     "a", [2], 8, 64, "", "daytime"),
    ("research", "nightly-train-29071-8xk2q", Workload("CronJob", "nightly-train"),
     "nightly-train", "a", [3, 4, 5, 6], 48, 512, "nlp", "training"),
    ("vision", "detector-train-5c7f9-h4j2n", Workload("Deployment", "detector-train"),
     "detector-train", "b", list(range(8)), 90, 1024, "vision", "training"),
    ("kube-system", "dcgm-exporter-a", Workload("DaemonSet", "dcgm-exporter"), "", "a", [],
     0.1, 0.5, "", "none"),
]


class SimCluster:
    """A `ClusterSource` (k8s/provider.py) for the demo."""

    def __init__(self, clock: Clock, began: datetime) -> None:
        self.began = began
        self.kube = SimKubeApi(clock)
        k = self.kube
        for ns in ("research", "serving", "vision", "kube-system"):
            k.add("namespaces", "", ns)
        for n in ("a", "b"):
            k.add("nodes", "", _node(n), labels={
                "node.kubernetes.io/instance-type": "p4d.24xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "eks.amazonaws.com/capacityType": "ON_DEMAND"})
        k.add("notebooks", "research", "notebook-ana", labels={"owner": "ana"},
              spec={"template": _template("notebook", 1, 8)})
        k.add("statefulsets", "research", "notebook-ana", spec={"replicas": 1},
              owner=("Notebook", "notebook-ana"))
        k.add("deployments", "serving", "chat-infer", spec={
            "replicas": 2, "template": _template("server", 1, 8)}, labels={"owner": "ravi"})
        k.add("cronjobs", "research", "nightly-train", spec={"schedule": "0 20 * * *"})
        k.add("jobs", "research", "nightly-train-29071",
              owner=("CronJob", "nightly-train"))
        k.add("deployments", "vision", "detector-train", spec={"replicas": 1},
              labels={"costguard.io/protect": "true"})

    def api(self) -> SimKubeApi:
        return self.kube

    def devices(self, start: datetime, end: datetime) -> int:
        return 16  # two nodes of eight

    def read(self, start: datetime, end: datetime, step: timedelta) -> ClusterRead:
        minutes = step_minutes(step)
        read = ClusterRead(CLUSTER, start, end, step)
        s = step.total_seconds()
        stamps = [start.timestamp() + k * s
                  for k in range(math.ceil((end - start).total_seconds() / s))]
        for n in ("a", "b"):
            node = Node(_node(n), f"aws:///us-east-1a/i-0demo0k8s000000{n}", gpus=8, cpu=96,
                        memory=1152 * GiB, steps=set(stamps))
            node.labels = {ksm_label("node.kubernetes.io/instance-type"): "p4d.24xlarge",
                           ksm_label("topology.kubernetes.io/region"): "us-east-1"}
            read.nodes[node.name] = node
        read.namespace_labels = {"research": {"label_team": "research"}}
        for ns, name, owner, stops_it, n, gpus, cpu, mem, team, pattern in _PODS:
            stopped = self.kube.stopped_at.get((ns, stops_it))
            running = [t for t in stamps
                       if stopped is None or t < stopped.timestamp()]
            if not running:
                continue
            req = Requests(gpus=len(gpus), gpu_units=len(gpus),
                           gpu_resource="nvidia.com/gpu" if gpus else "", cpu=cpu,
                           memory=mem * GiB)
            pod = Pod(PodKey(ns, name), node=_node(n), workload=owner,
                      labels={"label_team": team} if team else {},
                      requests=req, steps={t: req for t in running})
            for i, g in enumerate(gpus):
                dev = Device(f"GPU-demo{n}{g:04d}", str(g), A100, _node(n))
                pod.devices[(dev.uuid, "")] = dev
                pod.readings.extend(
                    PodMinute(gpu_index=i, minute=datetime.fromtimestamp(t, UTC),
                              span_minutes=minutes, sm_max=sm * 100, sm_mean=sm * 100 * 0.9,
                              util_max=min(100.0, sm * 140), util_mean=min(100.0, sm * 130),
                              mem_used_bytes=int((30 if sm else 18) * GiB))
                    for t in running
                    for sm in [self._activity(pattern, t, g)])
            read.pods[pod.key] = pod
        return read

    def _activity(self, pattern: str, t: float, gpu: int) -> float:
        hour = (t - self.began.timestamp()) / 3600
        if pattern == "training":
            return 0.55 + 0.1 * math.sin(t / 600 + gpu)
        if pattern == "morning":
            return 0.4 if hour < 3 else 0.0
        if pattern == "daytime":
            return 0.25 if hour < 10 else 0.0
        return 0.0


def _template(container: str, gpus: int, cpu: int) -> dict[str, Any]:
    """A pod template: what a stopped workload's pods will ask for when started."""
    return {"spec": {"containers": [{"name": container, "resources": {
        "limits": {"cpu": str(cpu), "nvidia.com/gpu": str(gpus)}}}]}}


def _node(n: str) -> str:
    return f"ip-10-0-{ord(n) - 96}-10.ec2.internal"
