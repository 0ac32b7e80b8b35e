"""The cheaper fit: from an instance's efficiency verdict, the cheapest instance type on the
same cloud that still holds what the job was measured to need, with the dollars and what
could break.

What a fit must hold (each with `headroom`, 20% by default):
* GPUs: as many as were used (at least one).
* Compute: the work measured, the signal's mean on the GPUs used times their dense FP16
  tensor throughput (shapes.TENSOR_TFLOPS) times the GPUs used; the fit's GPUs the job runs
  on (as many as it used, or fewer for a data-loading job) must offer that much: a job on
  one GPU is never spread over eight smaller ones (no headroom here: a GPU 90% busy fits on
  one of its kind). A busy A100 does not fit on an A10G because both hold its 1.6 GB. A GPU
  model with no throughput figure is never offered where compute must be proven (said).
* VRAM per GPU: the peak measured on any GPU used.
* vCPUs: the host CPU's p95 share of the current vCPUs (for a data-loading-bound job that
  many in all *and* more per GPU than today); host memory: its peak. Where the
  host was not measured, the current type's vCPUs and memory per GPU kept (stated).
* The same GPU vendor and CPU architecture (x86 binaries do not run on Graviton), and the
  GPU architecture `architectures` allows: `same` (default), `same-or-newer` or `any`.

Which GPUs, by bottleneck: latency-bound, healthy and unexplained jobs may move to any GPU
that holds them within `architectures` (a busy GPU that changes model gets a risk line:
its speed changes); data-loading-bound jobs keep their GPU model and need *more* vCPUs per
GPU than today, never a smaller GPU. Saturated, idle and unjudged instances get
no fit. Prices come from the price lookup handed in (the catalog with its overrides and
refreshed prices), both types at the same lifecycle, so the code does not care where a
price came from. $/month: the hourly difference over a month of 730 hours, times the share
of the time the instance ran (hours with readings over the hours since its first reading in
the window).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from costguard.model import HOURS_PER_MONTH, Instance, InstanceState, Lifecycle, PriceQuote
from costguard.recommend.settings import Architectures, RecommendSettings
from costguard.recommend.shapes import Shape, shapes
from costguard.telemetry.classify import gb
from costguard.telemetry.efficiency import Bottleneck, Efficiency

PriceLookup = Callable[[Instance], PriceQuote | None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Fit:
    """The outcome for one instance: a type to move to (`to`), or why there is none."""

    instance: Instance
    efficiency: Efficiency
    current: Shape | None
    to: Shape | None = None
    usd_per_hour: float | None = None  # the current type's, at the basis below
    to_usd_per_hour: float | None = None
    monthly_usd: float = 0.0  # saved per month (negative: the fit costs more)
    price_basis: str = ""
    needs: str = ""  # what the fit had to hold, in words
    reason: str = ""  # why there is no fit, or what the move does
    risks: tuple[str, ...] = field(default=())


def _probe(inst: Instance, instance_type: str, shape: Shape | None,
           lifecycle: Lifecycle) -> Instance:
    gpus = {"gpu_count": shape.gpus, "gpu_model": shape.gpu_model,
            "gpu_memory_mib": shape.gpu_memory_mib} if shape else {}
    return Instance(provider=inst.provider, account=inst.account, region=inst.region,
                    zone=inst.zone, instance_id="", instance_type=instance_type,
                    lifecycle=lifecycle, state=InstanceState.RUNNING, launch_time=_EPOCH,
                    observed_at=_EPOCH, **gpus)


@dataclass(frozen=True)
class _Need:
    gpus: int
    vram_mib: int
    vcpus: int
    memory_mib: int
    same_model: bool
    more_cpu_per_gpu: float | None  # data loading: vCPUs per GPU above this
    assumed: bool  # host not measured: vCPUs and memory kept per GPU
    tflops: float | None = None  # compute a fit must offer in all (None: not known)

    def text(self, shape: Shape) -> str:
        model = f" {shape.gpu_model}" if self.same_model else ""
        upto = "up to " if self.more_cpu_per_gpu is not None else ""
        out = f"{upto}{self.gpus}{model} GPU{'s' if self.gpus != 1 else ''}"
        if self.vram_mib and self.more_cpu_per_gpu is None:
            out += f" with >= {gb(self.vram_mib * 2**20)} each"
        if self.tflops is not None:
            out += f", >= {self.tflops:,.0f} TFLOPS (FP16 tensor) in all"
        out += f", >= {self.vcpus} vCPUs, >= {self.memory_mib / 1024:.0f} GiB"
        if self.more_cpu_per_gpu is not None:
            out += f", > {self.more_cpu_per_gpu:g} vCPUs per GPU"
        return out


def _need(e: Efficiency, cur: Shape, headroom: float) -> _Need:
    used = max(1, e.gpus_used or 0)
    up = 1 + headroom
    vram = math.ceil((e.vram_peak_bytes or 0) * up / 2**20)
    share = used / cur.gpus
    if e.host_cpu_p95 is not None and e.host_mem_peak_bytes is not None:
        vcpus = math.ceil(cur.vcpus * e.host_cpu_p95 / 100 * up)
        memory = math.ceil(e.host_mem_peak_bytes * up / 2**20)
        assumed = False
    else:
        vcpus, memory = math.ceil(cur.vcpus * share), math.ceil(cur.memory_mib * share)
        assumed = True
    loading = e.bottleneck is Bottleneck.DATA_LOADING  # wants more CPU per GPU than now
    # the work done: the mean of the signal on the GPUs used, at their throughput
    # (no headroom: a GPU 90% busy fits on one such GPU, never needs two)
    work = (cur.tflops * used * (e.gpu_mean or 0.0) / 100
            if cur.tflops is not None else None)
    return _Need(used, vram, max(1, vcpus), memory,
                 same_model=loading,
                 more_cpu_per_gpu=cur.vcpus / used if loading else None, assumed=assumed,
                 tflops=round(work, 1) if work is not None else None)


def _holds_compute(s: Shape, need: _Need) -> bool:
    """Each GPU the job runs on holds its share of the work: a job on one GPU stays on one
    (eight A10Gs do not hold one busy A100's work for it), one spread over four may move
    to fewer only where each then holds more."""
    if need.tflops is None:
        return True  # the current GPU's throughput is not known: compared by VRAM alone
    workers = min(s.gpus, need.gpus)
    return s.tflops is not None and s.tflops * workers >= need.tflops


def _fits(s: Shape, cur: Shape, need: _Need, arch: Architectures) -> bool:
    if s.instance_type == cur.instance_type or s.vendor != cur.vendor \
            or s.cpu_arch != cur.cpu_arch:
        return False
    if need.same_model and s.gpu_model != cur.gpu_model:
        return False
    if arch == "same" and s.architecture != cur.architecture:
        return False
    if arch == "same-or-newer" and s.generation < cur.generation:
        return False
    if not _holds_compute(s, need):
        return False
    if need.more_cpu_per_gpu is not None:
        return (s.gpus <= need.gpus and s.vcpus / s.gpus > need.more_cpu_per_gpu
                and s.vcpus >= need.vcpus and s.memory_mib >= need.memory_mib)
    return (s.gpus >= need.gpus and s.gpu_memory_mib >= need.vram_mib
            and s.vcpus >= need.vcpus and s.memory_mib >= need.memory_mib)


def _risks(e: Efficiency, cur: Shape, to: Shape, need: _Need) -> tuple[str, ...]:
    out = []
    if (e.gpus_used or 0) > 1 and cur.nvlink and not to.nvlink:
        out.append(f"{to.instance_type}'s GPUs talk over PCIe, not NVLink: a multi-GPU job "
                   "that exchanges gradients slows down")
    if cur.efa and not to.efa:
        out.append(f"{to.instance_type} has no EFA: multi-node jobs lose their fast network")
    if e.vram_peak_bytes:
        left = to.gpu_memory_mib * 2**20 - e.vram_peak_bytes
        out.append(f"VRAM peak {gb(e.vram_peak_bytes)} leaves {gb(max(0, left))} "
                   f"({left / (to.gpu_memory_mib * 2**20):.0%}) of the {to.gpu_model}'s "
                   f"{gb(to.gpu_memory_mib * 2**20)}: a larger batch or model needs more")
    if to.gpu_model != cur.gpu_model and e.bottleneck is not Bottleneck.LATENCY_BOUND:
        out.append(f"the GPU used was busy ({e.gpu_mean or 0:.0f}% mean): on {an(to.gpu_model)} "
                   f"instead of {an(cur.gpu_model)} it runs at another speed; measure a run")
    if to.architecture != cur.architecture:
        out.append(f"{cur.architecture} -> {to.architecture}: code built only for "
                   f"{cur.architecture} GPUs (custom CUDA kernels) needs a rebuild")
    if (e.gpus_used or 0) < cur.gpus:
        unused = cur.gpus - (e.gpus_used or 0)
        out.append(f"drops {unused} GPU{'s' if unused != 1 else ''} unused in the window: "
                   "a job that needs them only now and then would not fit")
    if to.gpus < (e.gpus_used or 0):
        out.append(f"runs on {to.gpus} GPU{'s' if to.gpus != 1 else ''} instead of the "
                   f"{e.gpus_used} used: a job sharded across them needs fewer workers")
    if need.assumed:
        out.append("host CPU and memory not measured: assumed proportional to the GPUs kept "
                   "(run the agent to measure them)")
    if need.tflops is None:
        out.append(f"compute not compared: costguard has no throughput figure for the "
                   f"{cur.gpu_model}")
    elif to.tflops is not None:
        offered = min(to.gpus, need.gpus) * to.tflops
        out.append(f"the work measured is {need.tflops:,.0f} TFLOPS (FP16 tensor); "
                   f"{to.instance_type} offers {offered:,.0f}: it would be "
                   f"{need.tflops / offered:.0%} busy")
    return tuple(out)


def cheaper_fit(inst: Instance, e: Efficiency, price: PriceLookup,
                settings: RecommendSettings | None = None) -> Fit:
    """The fit for one judged instance (see the module docstring)."""
    cfg = settings or RecommendSettings()
    catalog = shapes(inst.provider)
    cur = catalog.get(inst.instance_type)
    if not catalog:  # no instance types to move between: a Kubernetes workload's
        return Fit(inst, e, None, reason=(  # GPUs are what its pods request
            f"{inst.provider} has no instance types to fit to; a Kubernetes workload is "
            "fitted in the GPUs its pods request: costguard recommend --by pod"))
    if cur is None and inst.instance_type.startswith("ml."):  # a SageMaker notebook's
        return Fit(inst, e, None, reason=(
            f"{inst.instance_type} is a SageMaker ML type, not in costguard's shape catalog: "
            "its GPUs are judged, no cheaper ML type is named (docs/notebooks.md)"))
    if cur is None:
        return Fit(inst, e, None, reason=f"{inst.instance_type} is not in costguard's "
                                         f"{inst.provider} shape catalog")
    if not e.underused or e.bottleneck in (Bottleneck.IDLE, Bottleneck.INSUFFICIENT_DATA,
                                           Bottleneck.SATURATED):
        return Fit(inst, e, cur, reason=e.advice)
    need = _need(e, cur, cfg.headroom)
    lifecycle, basis = inst.lifecycle, f"{inst.lifecycle} list prices"
    here = price(_probe(inst, cur.instance_type, cur, lifecycle))
    if here is None and lifecycle is not Lifecycle.ON_DEMAND:
        lifecycle, basis = Lifecycle.ON_DEMAND, "on-demand list prices (spot moves hourly)"
        here = price(_probe(inst, cur.instance_type, cur, lifecycle))
    if here is None:
        return Fit(inst, e, cur, needs=need.text(cur),
                   reason=f"no price for {cur.instance_type} in {inst.region}")
    priced: list[tuple[float, int, str, Shape]] = []
    for s in catalog.values():
        if _fits(s, cur, need, cfg.architectures) and (
                q := price(_probe(inst, s.instance_type, s, lifecycle))) is not None:
            priced.append((q.usd_per_hour, s.gpus, s.instance_type, s))
    base = Fit(inst, e, cur, usd_per_hour=here.usd_per_hour, price_basis=basis,
               needs=need.text(cur))
    if need.more_cpu_per_gpu is None:
        priced = [p for p in priced if p[0] < here.usd_per_hour]
    if not priced:
        return _none(base, cfg)
    usd, _, _, to = min(priced)
    running = e.hours / e.span_hours if e.span_hours > 0 else 1.0
    monthly = round((here.usd_per_hour - usd) * HOURS_PER_MONTH * min(1.0, running), 2)
    return Fit(inst, e, cur, to, here.usd_per_hour, usd, monthly, basis, need.text(cur),
               _what(e, cur, to), _risks(e, cur, to, need))


def _none(base: Fit, cfg: RecommendSettings) -> Fit:
    cur = base.current
    assert cur is not None
    if base.efficiency.bottleneck is Bottleneck.DATA_LOADING:
        why = (f"no {cur.gpu_model} type offers more vCPUs per GPU than {cur.instance_type}: "
               "raise the data loader's workers or move preprocessing off the host")
    else:
        scope = {"same": f"{cur.architecture} ", "same-or-newer":
                 f"{cur.architecture}-or-newer ", "any": ""}[cfg.architectures]
        why = f"no cheaper {scope}type holds it"
        if cfg.architectures != "any":
            why += " (recommend.architectures: any widens the search)"
    return replace(base, reason=why)


def _what(e: Efficiency, cur: Shape, to: Shape) -> str:
    if e.bottleneck is Bottleneck.DATA_LOADING:
        return (f"{to.vcpus / to.gpus:g} vCPUs per GPU instead of "
                f"{cur.vcpus / max(1, e.gpus_used or 1):g}: the GPU stops waiting for data")
    if to.gpu_model != cur.gpu_model:
        return f"{an(to.gpu_model)} holds the measured peak"
    return f"keeps {e.gpus_used} {cur.gpu_model} of {cur.gpus}"


def an(noun: str) -> str:
    """`noun` with its article: an A10G, a T4 (by the letter's sound: an L4, an H100)."""
    return f"{'an' if noun[:1].upper() in 'AEFHILMNORSX' else 'a'} {noun}"
