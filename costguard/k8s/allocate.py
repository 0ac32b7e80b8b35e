"""Who pays for a cluster's GPU nodes, and how much of it was idle (docs/kubernetes.md).

Each step a GPU node exists, its hourly price is split by weights into a price per GPU,
per core and per GiB of memory (OpenCost's default rates, `configs/default.json`, as its
cost model splits a node whose total is known: $0.95 a GPU-hour, $0.031611 a core-hour,
$0.004237 a GiB-hour; a cluster may set its own). A running pod pays for what it requests
of the node at that step: its GPUs (a MIG slice by its share of the GPU), cores and memory.
What no pod requests is the cluster's idle capacity, charged to the cluster's `owner_team`.

Idle allocated GPUs: for every hour a pod ran, its GPUs' activity over that hour is judged
by the same classifier and rules as an instance's (SM activity first, coverage, no data is
not idle; `accounting.idle_signal` / `idle_below`). A pod's cost in an idle hour is idle
spend; in an hour without enough data it is unmeasured, never idle. Idle capacity is idle.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from costguard.costs.attribution import UNATTRIBUTED
from costguard.k8s.model import ClusterRead, Node, Pod, PodKey, Requests
from costguard.k8s.prices import NodePrice
from costguard.k8s.read import ksm_label
from costguard.k8s.settings import ClusterSettings, CostWeights
from costguard.model import Verdict
from costguard.telemetry.classify import SignalChoice, classify

IDLE_CAPACITY = "(idle capacity)"
DIMENSIONS = ("cluster", "namespace", "workload", "pod", "node", "team")
GiB = 2**30
MICROS = 1_000_000


@dataclass
class CostLine:
    """One pod's (or one node's idle capacity's) spend over the period."""

    cluster: str
    namespace: str
    workload: str
    pod: str
    node: str
    team: str
    cost_micros: int = 0
    gpu_cost_micros: int = 0  # of it, for its GPUs (the rest: cores and memory)
    idle_cost_micros: int = 0
    unmeasured_cost_micros: int = 0
    gpu_seconds: float = 0.0  # GPU-seconds requested (MIG slices by their share)
    idle_gpu_seconds: float = 0.0
    unpriced_gpu_seconds: float = 0.0  # on nodes no price is known for
    verdicts: dict[str, int] = field(default_factory=dict)  # hours per verdict
    evidence: str = ""  # the last judged hour's evidence

    def dimension(self, name: str) -> str:
        """The value of one of `DIMENSIONS` (each is a field of the line)."""
        value: str = getattr(self, name)
        return value

    def add(self, other: CostLine) -> None:
        """`other`'s figures summed into this line's."""
        self.cost_micros += other.cost_micros
        self.gpu_cost_micros += other.gpu_cost_micros
        self.idle_cost_micros += other.idle_cost_micros
        self.unmeasured_cost_micros += other.unmeasured_cost_micros
        self.gpu_seconds += other.gpu_seconds
        self.idle_gpu_seconds += other.idle_gpu_seconds
        self.unpriced_gpu_seconds += other.unpriced_gpu_seconds
        for verdict, hours in other.verdicts.items():
            self.verdicts[verdict] = self.verdicts.get(verdict, 0) + hours
        self.evidence = other.evidence or self.evidence


def team_of(pod: Pod, namespace_labels: Mapping[str, dict[str, str]],
            cfg: ClusterSettings) -> str:
    """The pod's `team_label`, else its namespace's, else the config's namespace map."""
    key = ksm_label(cfg.team_label)
    return (pod.labels.get(key) or namespace_labels.get(pod.key.namespace, {}).get(key)
            or cfg.namespace_teams.get(pod.key.namespace) or UNATTRIBUTED)


@dataclass(frozen=True)
class _Rates:
    gpu: float  # $/h per GPU
    cpu: float  # $/h per core
    memory: float  # $/h per byte

    def of(self, r: Requests) -> float:
        return r.gpus * self.gpu + r.cpu * self.cpu + r.memory * self.memory


def _rates(usd_per_hour: float, gpus: float, cpu: float, memory: float,
           w: CostWeights) -> _Rates:
    total = gpus * w.gpu + cpu * w.cpu + memory / GiB * w.memory_gib
    if total <= 0:
        return _Rates(0.0, 0.0, 0.0)
    unit = usd_per_hour / total
    return _Rates(unit * w.gpu, unit * w.cpu, unit * w.memory_gib / GiB)


def rates_of(price: NodePrice | None, node: Node, weights: CostWeights) -> _Rates:
    """A node's price per GPU, core and byte an hour (zero where its price is unknown)."""
    usd = price.quote.usd_per_hour if price is not None and price.quote else 0.0
    return _rates(usd, node.gpus, node.cpu, node.memory, weights)


def allocate(read: ClusterRead, prices: Mapping[str, NodePrice], cfg: ClusterSettings, *,
             idle_signal: SignalChoice = "auto", idle_below: float = 5.0) -> list[CostLine]:
    """Cost lines for every pod that ran on a GPU node, and each GPU node's idle capacity."""
    w = cfg.cost_weights
    step_s = read.step.total_seconds()
    step_h = step_s / 3600
    gpu_nodes = {n.name: n for n in read.nodes.values() if n.gpus > 0}
    on_node: dict[tuple[str, float], list[Pod]] = defaultdict(list)
    for pod in read.pods.values():
        if pod.node in gpu_nodes:
            for t in pod.steps:
                on_node[(pod.node, t)].append(pod)
    judged = {key: _hours(pod, read.step, idle_signal, idle_below)
              for key, pod in read.pods.items() if pod.requests.gpu_units > 0}
    pods: dict[PodKey, CostLine] = {}
    capacity: dict[str, CostLine] = {}  # each node's idle capacity

    def pod_line(pod: Pod, node: str) -> CostLine:
        cl = pods.get(pod.key)
        if cl is None:  # made once a pod, not once a step
            cl = pods[pod.key] = CostLine(
                read.cluster, pod.key.namespace, str(pod.owner), pod.key.name, node,
                team_of(pod, read.namespace_labels, cfg))
        return cl

    for name, node in sorted(gpu_nodes.items()):
        quote = prices.get(name)
        priced = quote is not None and quote.quote is not None
        rates = rates_of(quote, node, w)
        idle = capacity[name] = CostLine(read.cluster, IDLE_CAPACITY, "-", "-", name,
                                         cfg.owner_team or UNATTRIBUTED)
        for t in sorted(node.steps):
            used = Requests()
            for pod in on_node.get((name, t), []):
                req = pod.steps[t]
                used.gpus += req.gpus
                used.cpu += req.cpu
                used.memory += req.memory
                cl = pod_line(pod, name)
                micros = round(rates.of(req) * step_h * MICROS)
                cl.cost_micros += micros
                cl.gpu_cost_micros += round(rates.gpu * req.gpus * step_h * MICROS)
                cl.gpu_seconds += req.gpus * step_s
                if not priced:
                    cl.unpriced_gpu_seconds += req.gpus * step_s
                verdict = judged[pod.key].hours.get(_hour(t)) if pod.key in judged else None
                if verdict is Verdict.IDLE:
                    cl.idle_cost_micros += micros
                    cl.idle_gpu_seconds += req.gpus * step_s
                elif verdict is Verdict.NO_DATA and req.gpus > 0:
                    cl.unmeasured_cost_micros += micros
            free = Requests(gpus=max(0.0, node.gpus - used.gpus),
                            cpu=max(0.0, node.cpu - used.cpu),
                            memory=max(0.0, node.memory - used.memory))
            micros = round(rates.of(free) * step_h * MICROS)
            idle.cost_micros += micros
            idle.gpu_cost_micros += round(rates.gpu * free.gpus * step_h * MICROS)
            idle.idle_cost_micros += micros
            idle.gpu_seconds += free.gpus * step_s
            idle.idle_gpu_seconds += free.gpus * step_s
            if not priced:
                idle.unpriced_gpu_seconds += free.gpus * step_s
    for key, cl in pods.items():
        pod_judged = judged.get(key)
        if pod_judged is not None:
            for verdict in pod_judged.hours.values():
                cl.verdicts[str(verdict)] = cl.verdicts.get(str(verdict), 0) + 1
            cl.evidence = pod_judged.evidence
    return [cl for cl in (*pods.values(), *capacity.values())
            if cl.cost_micros or cl.gpu_seconds]


@dataclass(frozen=True)
class Judged:
    hours: dict[float, Verdict]  # each hour the pod held GPUs (its start, unix seconds)
    evidence: str  # the last hour's


def _hour(t: float) -> float:
    return t - t % 3600


def _hours(pod: Pod, step: timedelta, signal: SignalChoice, below: float) -> Judged:
    """The verdict of each hour the pod ran: its GPUs over the steps it ran in that hour."""
    by_hour: dict[float, list[float]] = defaultdict(list)
    for t, req in pod.steps.items():
        if req.gpu_units > 0:
            by_hour[_hour(t)].append(t)
    readings = sorted(pod.readings, key=lambda m: m.minute)
    stamps = [m.minute.timestamp() for m in readings]
    out: dict[float, Verdict] = {}
    evidence = ""
    for hour, ts in sorted(by_hour.items()):
        lo, hi = min(ts), max(ts) + step.total_seconds()
        inside = readings[bisect.bisect_left(stamps, lo):bisect.bisect_left(stamps, hi)]
        units = max(pod.steps[t].gpu_units for t in ts)
        c = classify(inside, window_start=datetime.fromtimestamp(lo, UTC),
                     window_end=datetime.fromtimestamp(hi, UTC), gpu_count=units,
                     signal=signal, below=below)
        out[hour], evidence = c.verdict, c.evidence
    return Judged(out, evidence)


def group(lines: Sequence[CostLine], by: Sequence[str]) -> list[tuple[tuple[str, ...], CostLine]]:
    """Lines summed by the `by` dimensions, dearest first."""
    out: dict[tuple[str, ...], CostLine] = {}
    for cl in lines:
        key = tuple(cl.dimension(d) for d in by)
        acc = out.get(key)
        if acc is None:
            c, ns, wl, pod, node, team = (cl.dimension(d) if d in by else "*"
                                          for d in DIMENSIONS)
            acc = out[key] = CostLine(c, ns, wl, pod, node, team)
        acc.add(cl)
    return sorted(out.items(), key=lambda kv: (-kv[1].cost_micros, kv[0]))
