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

from costguard.k8s.api import KubeObject
from costguard.k8s.model import Pod, Workload
from costguard.model import Instance, InstanceState, Owner, OwnerKind

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
        return sum(p.requests.gpu_units for p in self.pods)

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
        state = (InstanceState.STOPPED if self.stopped() and not any(p.steps for p in self.pods)
                 else InstanceState.RUNNING)
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
            owner=owner)


def _created(obj: KubeObject | None, now: datetime) -> datetime:
    raw = obj.meta.get("creationTimestamp") if obj is not None else None
    try:
        when = datetime.fromisoformat(str(raw).replace("Z", "+00:00")) if raw else now
    except ValueError:
        return now
    return when if when.tzinfo else when.replace(tzinfo=UTC)
