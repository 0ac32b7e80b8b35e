"""The cheaper fit of a Cloud TPU node: a smaller slice of the same generation that holds the
chips the job was measured to use, priced by the chip-hour (`data/tpu_types.json`).

Only the same generation: a program compiled for one TPU generation runs on another after
a recompile at most, but its speed and its memory per chip change, and costguard does not
move work across kinds (a TPU job to GPUs or to Trainium: a port, docs/accelerators.md).
The sizes offered are the generation's single-host slices (`v5litepod-1`, `-4`, `-8`;
`v4-8`) and multi-host slices of whole hosts in powers of two, smaller than today's and
with at least as many chips as were used. A TPU VM's host vCPUs and memory come with its
chips and are not compared. Idle, saturated and unjudged nodes get no fit, as GPUs do.
"""

from __future__ import annotations

from dataclasses import replace

from costguard.model import HOURS_PER_MONTH, Instance
from costguard.providers.gcp import tpus
from costguard.recommend.fit import Fit
from costguard.recommend.shapes import Shape
from costguard.telemetry.efficiency import Bottleneck, Efficiency


def type_name(gen: tpus.Generation, chips: int) -> str | None:
    """The accelerator type of `chips` chips of `gen` (None where its naming is unknown)."""
    if gen.counts is None:
        return None
    per_chip = gen.tensorcores_per_chip if gen.counts == "tensorcores" else 1
    return f"{gen.type_prefix}{chips * per_chip}"


def _shape(gen: tpus.Generation, name: str, chips: int, provider: str) -> Shape:
    # ICI links a slice's chips (nvlink: the interconnect is there); the host comes with them
    return Shape(provider, name, chips, gen.model, gen.hbm_mib_per_chip, vcpus=0, memory_mib=0,
                 nvlink=chips > 1)


def sizes(gen: tpus.Generation, below: int) -> list[int]:
    """The slice sizes (chips) of `gen` smaller than `below`: its single-host sizes, then
    whole hosts in powers of two."""
    single = [n for n in (1, 4, 8) if n <= gen.single_host_chips]
    if gen.counts == "tensorcores":  # v2, v3, v4, v5p: the smallest slice is one host
        single = [gen.chips_per_host]
    out = set(single)
    hosts = 2
    while hosts * gen.chips_per_host < below:
        out.add(hosts * gen.chips_per_host)
        hosts *= 2
    return sorted(n for n in out if n < below)


def tpu_fit(inst: Instance, e: Efficiency) -> Fit | None:
    """The fit of a TPU node (None: `inst` carries no TPU this catalog knows)."""
    gen = tpus.by_model(inst.gpu_model)
    if gen is None:
        return None
    name = inst.instance_type if tpus.is_tpu_type(inst.instance_type) else type_name(
        gen, inst.gpu_count)
    cur = _shape(gen, name or inst.instance_type, inst.gpu_count, inst.provider)
    if not e.underused or e.bottleneck in (Bottleneck.IDLE, Bottleneck.INSUFFICIENT_DATA,
                                           Bottleneck.SATURATED):
        return Fit(inst, e, cur, reason=e.advice)
    used = max(1, e.gpus_used or 0)
    needs = f"{used} {gen.model} chip{'s' if used != 1 else ''} of the same generation"
    here = tpus.list_price(gen.model, inst.gpu_count)
    if here is None:
        return Fit(inst, e, cur, needs=needs, reason=f"no list price for {gen.model} chips")
    fits = [(n, type_name(gen, n)) for n in sizes(gen, inst.gpu_count) if n >= used]
    fits = [(n, t) for n, t in fits if t is not None]
    base = Fit(inst, e, cur, usd_per_hour=here, price_basis="on-demand list prices "
               "(chip-hour)", needs=needs)
    if not fits:
        return replace(base, reason=f"no smaller {gen.model} slice holds {used} chips")
    chips, to_name = fits[0]
    assert to_name is not None
    to_usd = tpus.list_price(gen.model, chips)
    assert to_usd is not None  # the generation is priced (here is not None)
    running = e.hours / e.span_hours if e.span_hours > 0 else 1.0
    monthly = round((here - to_usd) * HOURS_PER_MONTH * min(1.0, running), 2)
    unused = inst.gpu_count - (e.gpus_used or 0)
    risks = (
        f"drops {unused} chip{'s' if unused != 1 else ''} unused in the window: a job that "
        "needs them only now and then would not fit",
        f"a program sharded over {inst.gpu_count} chips needs its mesh (and batch) set for "
        f"{chips}; recreate the node as {to_name} (a TPU node's type cannot be changed)",
    )
    return Fit(inst, e, cur, _shape(gen, to_name, chips, inst.provider), here, to_usd, monthly,
               base.price_basis, needs, f"keeps {used} {gen.model} chips of {inst.gpu_count}",
               risks)
