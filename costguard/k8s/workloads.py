"""The workloads costguard governs in a cluster: what owns each GPU pod, as one unit.

A policy with `resource: workload` governs the thing that would recreate a pod: a
Deployment (the pods of all its replicas), a StatefulSet, a Kubeflow Notebook (the
StatefulSet its controller made), a Job, a CronJob (the pods of its running Jobs), a
JupyterHub single-user server (KubeSpawner's pod), or a bare pod. Each is handed to the
engine as an `Instance` of provider `k8s`, so the engine's whole safety path applies to it
unchanged: the idle window and coverage, warn, grace, re-check, caps, journal, dry-run,
snooze and protect. Its fields:

    instance_id   CLUSTER/NAMESPACE/KIND/NAME          account  the cluster
    name          NAMESPACE/KIND/NAME                  region   the namespace
    instance_type the kind (Deployment, Notebook...)   gpu_count the GPUs its pods hold
    tags          its labels, its annotations (costguard.io/KEY read as costguard:KEY), the
                  namespace's costguard.io/protect and snooze, and `team`

Never handed over: anything in a protected namespace, a DaemonSet's pods (one per node by
design: never idle capacity to reclaim). A pod whose controller costguard does not know (a
ReplicaSet of no Deployment, a RayCluster, a PyTorchJob...) is handed over with that
controller as its owner, so it is reported and never acted on as if it were alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from costguard.k8s.api import KubeObject
from costguard.k8s.model import Pod, Workload, api_resource_share
from costguard.model import Instance, InstanceKind, InstanceState, Owner, OwnerKind
from costguard.providers.base import TAG_SPELLINGS

PROVIDER = "k8s"
PREFIX = "costguard.io/"
REPLICAS_BEFORE = PREFIX + "replicas-before"  # a scaled-to-zero workload's replica count
STOPPED_AT = PREFIX + "stopped-at"  # when costguard stopped it (every kind)
KUBEFLOW_STOPPED = "kubeflow-resource-stopped"  # Kubeflow's own stop annotation
# kinds costguard stops through their own API, and the object each is read as
PLURALS = {"Deployment": "deployments", "StatefulSet": "statefulsets", "Job": "jobs",
           "CronJob": "cronjobs", "Notebook": "notebooks", "Pod": "pods",
           "JupyterServer": "pods"}
NEVER = ("DaemonSet",)
MAX_ID = 128  # what the store's instance_id column holds


def tag_key(annotation: str) -> str:
    """`costguard.io/protect` -> `costguard:protect`: one policy file for every provider."""
    return "costguard:" + annotation[len(PREFIX):] if annotation.startswith(PREFIX) else annotation


def annotation_key(tag: str) -> str:
    return PREFIX + tag[len("costguard:"):] if tag.startswith("costguard:") else tag


TAG_SPELLINGS[PROVIDER] = lambda key: f"annotation {annotation_key(key)}"


def workload_id(cluster: str, namespace: str, kind: str, name: str) -> str:
    """CLUSTER/NAMESPACE/KIND/NAME, or its first characters and a digest when longer than
    the store holds (Kubernetes names reach 253 characters)."""
    full = f"{cluster}/{namespace}/{kind}/{name}"
    if len(full) <= MAX_ID:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:16]
    return f"{full[:MAX_ID - 17]}~{digest}"


@dataclass
class Governed:
    """One workload this cycle: its object, its GPU pods and what it costs an hour."""

    cluster: str
    namespace: str
    kind: str
    name: str
    obj: KubeObject | None  # None: a controller costguard does not act through
    pods: list[Pod] = field(default_factory=list)
    usd_per_hour: float | None = None
    namespace_tags: dict[str, str] = field(default_factory=dict)
    team: str | None = None
    controller: Workload | None = None  # an unknown controller that owns the pods
    hpa: str | None = None  # the HorizontalPodAutoscaler that scales it, if one does

    @property
    def instance_id(self) -> str:
        return workload_id(self.cluster, self.namespace, self.kind, self.name)

    @property
    def gpus(self) -> int:
        """The GPUs (and MIG slices) its running pods request; for a workload costguard
        stopped, those its pod template asks for, times the replicas it will start with."""
        running = sum(p.requests.gpu_units for p in self.pods)
        if running or self.obj is None or not self.stopped():
            return running
        return template_gpus(self.kind, self.obj)

    def stopped(self) -> bool:
        """Stopped by costguard (or by Kubeflow's own stop), with nothing running."""
        obj = self.obj
        if obj is None:
            return False
        ann = obj.annotations
        if self.kind == "Notebook":
            return KUBEFLOW_STOPPED in ann
        if self.kind in ("Deployment", "StatefulSet"):
            return REPLICAS_BEFORE in ann and obj.replicas == 0
        if self.kind in ("Job", "CronJob"):
            return obj.suspended and STOPPED_AT in ann
        return False

    def instance(self, now: datetime) -> Instance:
        obj = self.obj
        tags = dict(self.namespace_tags)
        if obj is not None:
            # costguard.io/KEY, as a label or an annotation, is costguard:KEY
            tags.update({tag_key(k): v for k, v in obj.labels.items()})
            tags.update({tag_key(k): v for k, v in obj.annotations.items()
                         if k.startswith(PREFIX)})
        if self.team and "team" not in tags:
            tags["team"] = self.team
        models = sorted({d.model for p in self.pods for d in p.devices.values() if d.model})
        # the object says whether it is stopped: its pods may still show in the minutes
        # Prometheus holds after the stop, and a stop seen as undone then redone would
        # lose the start it is owed (actions/lifecycle.py)
        state = InstanceState.STOPPED if self.stopped() else InstanceState.RUNNING
        owner = None
        if self.controller is not None:
            owner = Owner(kind=OwnerKind.UNKNOWN, name=str(self.controller),
                          scope=self.namespace, cluster=self.cluster,
                          via=f"ownerReferences: {self.controller.kind}, a controller "
                              "costguard does not act through")
        return Instance(
            provider=PROVIDER, account=self.cluster, region=self.namespace,
            instance_id=self.instance_id, name=f"{self.namespace}/{self.kind}/{self.name}",
            instance_type=self.kind, state=state, gpu_count=self.gpus,
            gpu_model=models[0] if models else None, launch_time=_created(obj, now),
            tags={k: v for k, v in tags.items() if k and len(k) <= 256}, observed_at=now,
            owner=owner, kind=InstanceKind.WORKLOAD)


def _created(obj: KubeObject | None, now: datetime) -> datetime:
    raw = obj.meta.get("creationTimestamp") if obj is not None else None
    try:
        when = datetime.fromisoformat(str(raw).replace("Z", "+00:00")) if raw else now
    except ValueError:
        return now
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _template(kind: str, spec: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The pod template of a workload's spec and how many pods of it run at once."""
    if kind == "CronJob":
        job = spec.get("jobTemplate")
        spec = job.get("spec", {}) if isinstance(job, dict) else {}
        spec = spec if isinstance(spec, dict) else {}
    template = spec.get("template")
    pod = template.get("spec") if isinstance(template, dict) else None
    parallel = spec.get("parallelism") if kind in ("Job", "CronJob") else 1
    return (pod if isinstance(pod, dict) else {},
            parallel if isinstance(parallel, int) and parallel > 0 else 1)


def template_gpus(kind: str, obj: KubeObject) -> int:
    """The GPUs (whole, or MIG slices) a stopped workload's pods will request when started:
    its pod template's `nvidia.com/gpu` and `nvidia.com/mig-*` limits (requests where no
    limit), times the replicas kept on it (a Job's parallelism)."""
    pod, count = _template(kind, obj.spec)
    if kind in ("Deployment", "StatefulSet"):
        kept = obj.annotations.get(REPLICAS_BEFORE, "")
        count = int(kept) if kept.isdigit() else 0
    per_pod = 0
    containers = pod.get("containers")
    for c in containers if isinstance(containers, list) else []:
        resources = c.get("resources") if isinstance(c, dict) else None
        if not isinstance(resources, dict):
            continue
        limits, requests = resources.get("limits"), resources.get("requests")
        asked = limits if isinstance(limits, dict) and limits else requests
        for key, value in (asked.items() if isinstance(asked, dict) else ()):
            text = str(value)
            if text.isdigit() and api_resource_share(str(key)) is not None:
                per_pod += int(text)
    return per_pod * count
