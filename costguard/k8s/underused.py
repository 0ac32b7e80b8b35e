"""The underused analysis per pod (docs/kubernetes.md "GPUs that do a little"): each GPU pod
of a cluster read judged by the instance verdict (`telemetry/efficiency.judge`: GPUs used
of the GPUs paid, the signal's mean on them, VRAM peak, CPU, bottleneck) over the
`recommend:` window and thresholds.

A pod's "host" is its own CPU: cAdvisor's cores used (the kubelet's
`container_cpu_usage_seconds_total`, read with the GPU signals) over the cores it requests,
so a pod pinned at its CPU request with a waiting GPU is data-loading-bound, and one whose
CPU and GPU both wait is latency-bound. A pod that requests no CPU, or whose kubelet
Prometheus does not scrape, has its CPU unmeasured (a low GPU is then cause-unknown, never
guessed).

A pod's fit is in what it requests, not in instance types: where some of the GPUs it
requests did no work, the GPUs used (the same resource: whole GPUs or MIG slices), saving
the GPUs given back at what the pod paid per GPU-hour in the window (its node's GPU rate,
k8s/allocate.py), over a month of 730 hours times the share of the time it ran. Other
bottlenecks get advice, not dollars: a smaller MIG slice or a shared GPU depends on what
the cluster's nodes offer, which costguard does not decide for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from costguard.k8s.allocate import IDLE_CAPACITY, CostLine
from costguard.k8s.minutes import gpu_minutes
from costguard.k8s.model import ClusterRead, Pod
from costguard.model import HOURS_PER_MONTH, GpuMinute
from costguard.recommend.settings import RecommendSettings
from costguard.telemetry.efficiency import Bottleneck, Efficiency, Words, judge

POD_ADVICE = {
    Bottleneck.HEALTHY: "the GPUs it requests are busy: keep them",
    Bottleneck.UNUSED_GPUS: "the GPUs used are busy, but some it requests did no work: "
                            "request only the GPUs used",
    Bottleneck.SATURATED: "GPU and CPU both busy: it needs more, not less",
    Bottleneck.DATA_LOADING: "the GPU waits for its data while the pod uses its CPU "
                             "request: request more CPU (more loader workers), not a "
                             "smaller GPU",
    Bottleneck.LATENCY_BOUND: "GPU and CPU both mostly waiting: a batch too small or a "
                              "sparse server; a smaller MIG slice or a shared GPU serves it",
    Bottleneck.CAUSE_UNKNOWN: "GPU low, and the pod's CPU not measured to say why: "
                              "Prometheus has no cAdvisor CPU for it (the kubelet's "
                              "container_cpu_usage_seconds_total), or it requests no CPU",
    Bottleneck.IDLE: "no GPU did work: an idle workload policy's case",
    Bottleneck.INSUFFICIENT_DATA: "not enough readings to judge: no data is not underused",
}
POD_WORDS = Words(host="pod", cores="cores requested", advice=POD_ADVICE)


@dataclass(frozen=True)
class PodEfficiency:
    """One GPU pod's verdict, its spend in the window and what requesting less saves."""

    line: CostLine  # its spend over the period read, with its cluster, workload and team
    gpu_resource: str  # nvidia.com/gpu, nvidia.com/mig-3g.20gb...
    efficiency: Efficiency
    fit_gpus: int | None = None  # devices to request instead (some requested did nothing)
    usd_per_gpu_hour: float | None = None  # what one requested device cost it an hour
    monthly_usd: float = 0.0  # what requesting `fit_gpus` saves a month

    @property
    def spend_usd(self) -> float:
        return self.line.cost_micros / 1e6

    @property
    def underused_usd(self) -> float:
        return self.spend_usd if self.efficiency.underused else 0.0

    @property
    def advice(self) -> str:
        return POD_ADVICE[self.efficiency.bottleneck]


def judge_pods(read: ClusterRead, lines: Sequence[CostLine],
               settings: RecommendSettings) -> list[PodEfficiency]:
    """Every pod of `read` that requested GPUs, judged over the read's period, in pod order
    (`k8s/recommend.pod_recommendations` orders what it shows)."""
    by_pod = {(cl.namespace, cl.pod): cl for cl in lines
              if cl.cluster == read.cluster and cl.namespace != IDLE_CAPACITY}
    out = []
    for key, pod in sorted(read.pods.items()):
        line = by_pod.get((key.namespace, key.name))
        if pod.requests.gpu_units <= 0 or line is None:
            continue
        e = judge(_minutes(read.cluster, pod), window_start=read.start, window_end=read.end,
                  gpu_count=pod.requests.gpu_units, settings=settings, words=POD_WORDS,
                  step_minutes=int(read.step.total_seconds() // 60))
        out.append(_fit(line, pod, e))
    return out


def _fit(line: CostLine, pod: Pod, e: Efficiency) -> PodEfficiency:
    req = pod.requests
    device_hours = (line.gpu_seconds / 3600 * req.gpu_units / req.gpus) if req.gpus else 0.0
    rate = line.gpu_cost_micros / 1e6 / device_hours if device_hours else None
    base = PodEfficiency(line, req.gpu_resource, e, usd_per_gpu_hour=rate)
    used = e.gpus_used or 0
    if not 0 < used < req.gpu_units or e.bottleneck is Bottleneck.INSUFFICIENT_DATA:
        return base
    ran = e.hours / e.span_hours if e.span_hours else 0.0
    monthly = (req.gpu_units - used) * (rate or 0.0) * HOURS_PER_MONTH * min(1.0, ran)
    return PodEfficiency(line, req.gpu_resource, e, used, rate, round(monthly, 2))


def _minutes(cluster: str, pod: Pod) -> list[GpuMinute]:
    """The pod's GPU readings as the verdict reads them (read more than once: a model
    each), each step's CPU as its host's: cores used over cores requested (none where
    either is unknown)."""
    return list(gpu_minutes(f"{cluster}/{pod.key}", [(pod.requests.gpu_units, pod)],
                            scope=f"kubernetes cluster {cluster}"))
