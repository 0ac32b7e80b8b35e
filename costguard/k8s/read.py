"""Read one cluster over a period from its Prometheus: nodes, GPU pods, owners, labels and
what each pod's GPUs did and the CPU it used, in a fixed number of queries whatever the
cluster's size (three range queries and seven instant ones; a long period is split by the
client, never per pod).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from costguard.k8s import queries as q
from costguard.k8s.model import (
    ClusterRead,
    Device,
    Node,
    Pod,
    PodKey,
    Requests,
    Workload,
    gpu_resource_share,
    ksm_name,
)
from costguard.k8s.prometheus import PrometheusClient, Series
from costguard.k8s.settings import ClusterSettings
from costguard.model import MAX_SPAN_MINUTES, TelemetrySource

# dcgm-exporter's pod labels, first match wins: a scrape without honor_labels keeps the
# exporter's own under exported_* (the plain ones then name the exporter's pod); the old
# names come from dcgm-exporter's --use-old-namespace
_POD = ("exported_pod", "pod", "pod_name")
_NAMESPACE = ("exported_namespace", "namespace", "pod_namespace")
_HOST = ("Hostname", "hostname", "exported_Hostname")
MiB = 2**20
# A read holds at most this many figures per query: ~25 bytes each in Prometheus' JSON, a
# fraction of the 128 MiB an answer may be and of the daemon's memory. A GPU device adds
# its seven signals and (at most) its pod's CPU per step.
MAX_POINTS_PER_READ = 2_000_000
FIGURES_PER_DEVICE = 8


def ksm_label(key: str) -> str:
    """A Kubernetes label key as KSM names it in `kube_*_labels` (`example.com/team` ->
    `label_example_com_team`)."""
    return "label_" + ksm_name(key)


def _labels_of(series: Series) -> dict[str, str]:
    """A `kube_*_labels` series' Kubernetes labels, keyed as KSM names them (label_...)."""
    return {k: v for k, v in series.labels.items() if k.startswith("label_") and v}


@dataclass(frozen=True)
class PodMinute:
    """One pod GPU's activity over one step, as the idle classifier reads it (the `Reading`
    protocol of costguard.model): percentages 0-100, memory in bytes."""

    gpu_index: int
    minute: datetime
    span_minutes: int
    sm_max: float | None = None
    sm_mean: float | None = None
    util_max: float | None = None
    util_mean: float | None = None
    mem_used_bytes: int | None = None
    source: TelemetrySource = TelemetrySource.DCGM
    util_p95: float | None = None
    sm_p95: float | None = None
    process_count: int | None = None
    top_process_pid: int | None = None
    top_process_bytes: int | None = None


def step_minutes(step: timedelta) -> int:
    minutes, rest = divmod(int(step.total_seconds()), 60)
    if rest or not 1 <= minutes <= MAX_SPAN_MINUTES:
        raise ValueError(f"a step of whole minutes, 1 to {MAX_SPAN_MINUTES}, not {step}")
    return minutes


def read_cluster(client: PrometheusClient, cfg: ClusterSettings, start: datetime,
                 end: datetime, step: timedelta) -> ClusterRead:
    """The cluster over [start, end), its state sampled at each `step` from `start`."""
    minutes = step_minutes(step)
    if end - start < step:
        raise ValueError(f"a period of at least one step ({step}), not {end - start}")
    sel = cfg.selector
    span = end - start + step
    last = end - step  # the state at t stands for [t, t + step)
    before = client.calls
    read = ClusterRead(cfg.name, start, end, step)

    for s in client.query_range(q.nodes(sel), start, last, step):
        node = read.nodes.setdefault(s.get("node"), Node(s.get("node")))
        node.provider_id = s.get("provider_id") or node.provider_id
        node.steps.update(t for t, v in s.points if v > 0)
    for s in client.query(q.node_allocatable(sel, span), end):
        node = read.nodes.setdefault(s.get("node"), Node(s.get("node")))
        _add(node, s.get("resource"), s.last)
    for s in client.query(q.labels("kube_node_labels", sel, span), end):
        if s.get("node") in read.nodes:
            read.nodes[s.get("node")].labels.update(_labels_of(s))

    for s in client.query_range(q.pod_requests(sel), start, last, step):
        key = PodKey(s.get("namespace"), s.get("pod"))
        pod = read.pods.setdefault(key, Pod(key))
        pod.node = s.get("node") or pod.node
        for t, v in s.points:
            _request(pod.steps.setdefault(t, Requests()), s.get("resource"), v)
    for pod in read.pods.values():
        pod.requests = _peak(pod.steps.values())
    _owners(client, read, sel, span, end)
    for s in client.query(q.labels("kube_pod_labels", sel, span), end):
        pod_at = read.pods.get(PodKey(s.get("namespace"), s.get("pod")))
        if pod_at is not None:
            pod_at.labels.update(_labels_of(s))
    for s in client.query(q.labels("kube_namespace_labels", sel, span), end):
        read.namespace_labels.setdefault(s.get("namespace"), {}).update(_labels_of(s))

    _activity(client, read, sel, start, end, step, minutes)
    read.calls = client.calls - before
    return read


def _add(node: Node, resource: str, value: float) -> None:
    share = gpu_resource_share(resource)
    if share is not None:
        node.gpus += value * share
    elif resource == "cpu":
        node.cpu = value
    elif resource == "memory":
        node.memory = value


def _request(req: Requests, resource: str, value: float) -> None:
    share = gpu_resource_share(resource)
    if share is not None and value > 0:
        req.gpus += value * share
        req.gpu_units += round(value)
        name = ("nvidia.com/gpu" if resource == "nvidia_com_gpu"
                else "nvidia.com/" + resource.removeprefix("nvidia_com_").replace("_", "-", 1)
                .replace("_", "."))
        req.gpu_resource = name if not req.gpu_resource else (
            req.gpu_resource if name in req.gpu_resource else f"{req.gpu_resource}+{name}")
    elif resource == "cpu":
        req.cpu += value
    elif resource == "memory":
        req.memory += value


def _peak(steps: Iterable[Requests]) -> Requests:
    """The most a pod requested at any step (a pod's requests do not change while it runs;
    a resize or a restart with new requests shows as its largest)."""
    return max(steps, key=lambda r: (r.gpus, r.cpu, r.memory), default=Requests())


def _owners(client: PrometheusClient, read: ClusterRead, sel: str, span: timedelta,
            at: datetime) -> None:
    """Each pod's controlling workload: a ReplicaSet's Deployment, a Job's CronJob."""
    rs = {(s.get("namespace"), s.get("replicaset")): Workload(s.get("owner_kind"),
                                                              s.get("owner_name"))
          for s in client.query(q.replicaset_owners(sel, span), at) if s.get("owner_name")}
    jobs = {(s.get("namespace"), s.get("job_name")): Workload(s.get("owner_kind"),
                                                              s.get("owner_name"))
            for s in client.query(q.job_owners(sel, span), at) if s.get("owner_name")}
    for s in client.query(q.pod_owners(sel, span), at):
        pod = read.pods.get(PodKey(s.get("namespace"), s.get("pod")))
        kind, name = s.get("owner_kind"), s.get("owner_name")
        if pod is None or not name or kind == "<none>":
            continue
        owner = Workload(kind, name)
        if kind == "ReplicaSet":
            owner = rs.get((pod.key.namespace, name), owner)
        elif kind == "Job":
            owner = jobs.get((pod.key.namespace, name), owner)
        pod.workload = owner


def _activity(client: PrometheusClient, read: ClusterRead, sel: str, start: datetime,
              end: datetime, step: timedelta, minutes: int) -> None:
    """Each GPU's signals per step, given to the pod holding it (grouped by pod as they
    come: one pass over the answer); each GPU pod's CPU, cores per step. A point at t is
    the step (t - step, t]. A series whose pod requested no GPU (the exporter's own pod,
    where a scrape did not honour its labels) is a GPU no pod holds."""
    # each holder's figures: (device, step) -> signal -> value
    held: dict[PodKey, dict[tuple[tuple[str, str], float], dict[str, float]]] = (
        defaultdict(lambda: defaultdict(dict)))
    devices: dict[tuple[str, str], Device] = {}
    for s in client.query_range(q.gpu_signals(sel, step), start + step, end, step):
        if s.get("cg_signal") == q.CPU_SIGNAL:
            cpu_of = read.pods.get(PodKey(s.get("namespace"), s.get("pod")))
            if cpu_of is not None:
                cpu_of.cpu_used.update((t - step.total_seconds(), v) for t, v in s.points
                                       if v >= 0)
            continue
        dev_key = (s.get("UUID", "uuid", "gpu_uuid"), s.get("GPU_I_ID"))
        node = s.get(*_HOST)
        if dev_key not in devices:
            devices[dev_key] = Device(uuid=dev_key[0], gpu=s.get("gpu"),
                                      model=s.get("modelName", "model_name"), node=node,
                                      mig_profile=s.get("GPU_I_PROFILE"), mig_id=dev_key[1])
        key = PodKey(s.get(*_NAMESPACE), s.get(*_POD))
        pod = read.pods.get(key)
        if pod is None or pod.requests.gpu_units <= 0:
            if node:
                read.free_devices.setdefault(node, set()).add(dev_key)
            continue
        pod.devices.setdefault(dev_key, devices[dev_key])
        signal = s.get("cg_signal")
        figures = held[key]
        for t, v in s.points:
            figures[(dev_key, t - step.total_seconds())][signal] = v
    for key, figures in held.items():
        pod = read.pods[key]
        order = {k: i for i, k in enumerate(sorted(pod.devices, key=lambda k: (
            devices[k].node, _int(devices[k].gpu), k[1], k[0])))}
        pod.readings = sorted(
            (_minute(order[dev_key], t, minutes, got) for (dev_key, t), got in figures.items()),
            key=lambda m: (m.minute, m.gpu_index))


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 1 << 30


def _minute(index: int, t: float, minutes: int, got: dict[str, float]) -> PodMinute:
    def pct(name: str, scale: float) -> float | None:
        v = got.get(name)
        return None if v is None else min(100.0, max(0.0, v * scale))

    util_max, util_mean = pct("util_max", 1), pct("util_mean", 1)
    if util_max is None:  # MIG instances have no DCGM_FI_DEV_GPU_UTIL; the engine's is it
        util_max, util_mean = pct("gr_max", 100), pct("gr_mean", 100)
    fb = got.get("fb_used_mib")
    return PodMinute(
        gpu_index=index, minute=datetime.fromtimestamp(t, UTC), span_minutes=minutes,
        sm_max=pct("sm_max", 100), sm_mean=pct("sm_mean", 100),
        util_max=util_max, util_mean=util_mean,
        mem_used_bytes=None if fb is None or fb < 0 else int(fb * MiB))



def devices_of(read: ClusterRead) -> int:
    """The GPU devices a read saw: held by pods, and free."""
    return (sum(len(p.devices) for p in read.pods.values())
            + sum(len(d) for d in read.free_devices.values()))


def read_spans(start: datetime, end: datetime, devices: int, step: timedelta
               ) -> list[tuple[datetime, datetime]]:
    """[start, end) in whole steps, cut so that no read of `devices` holds more than
    `MAX_POINTS_PER_READ` figures (a day of a thousand GPUs at minutes is 11.5 million)."""
    steps = max(1, MAX_POINTS_PER_READ // (max(1, devices) * FIGURES_PER_DEVICE))
    width = step * steps
    out, lo = [], start
    while lo < end:
        out.append((lo, min(end, lo + width)))
        lo += width
    return out
