"""Which GPUs a Compute Engine VM has.

Two sources: `guestAccelerators` (N1 + attached GPUs, and most accelerator-optimized
types too), and the machine type itself for accelerator-optimized families (A2, A3, A4,
A4X, G2, G4),
whose GPUs are fixed by the type. `guestAccelerators` wins when present so a GPU is
never counted twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from costguard.providers.gcp import tpus


@dataclass(frozen=True)
class GpuSpec:
    accelerator: str  # Compute Engine accelerator type name, e.g. "nvidia-a100-80gb"
    model: str  # short NVIDIA name shared with other providers, e.g. "A100"
    memory_mib: int  # per GPU


_GIB = 1024

# Per-GPU memory as cloud.google.com/compute/docs/gpus lists it (a K80 board is two GPUs of
# 12 GB each; GB200 186 GB; RTX PRO 6000 96 GB).
ACCELERATORS: dict[str, GpuSpec] = {
    spec.accelerator: spec
    for spec in (
        GpuSpec("nvidia-tesla-k80", "K80", 12 * _GIB),
        GpuSpec("nvidia-tesla-t4", "T4", 16 * _GIB),
        GpuSpec("nvidia-tesla-t4-vws", "T4", 16 * _GIB),
        GpuSpec("nvidia-tesla-p4", "P4", 8 * _GIB),
        GpuSpec("nvidia-tesla-p4-vws", "P4", 8 * _GIB),
        GpuSpec("nvidia-tesla-p100", "P100", 16 * _GIB),
        GpuSpec("nvidia-tesla-p100-vws", "P100", 16 * _GIB),
        GpuSpec("nvidia-tesla-v100", "V100", 16 * _GIB),
        GpuSpec("nvidia-l4", "L4", 24 * _GIB),
        GpuSpec("nvidia-l4-vws", "L4", 24 * _GIB),
        GpuSpec("nvidia-tesla-a100", "A100", 40 * _GIB),
        GpuSpec("nvidia-a100-80gb", "A100", 80 * _GIB),
        GpuSpec("nvidia-h100-80gb", "H100", 80 * _GIB),
        GpuSpec("nvidia-h100-mega-80gb", "H100", 80 * _GIB),
        GpuSpec("nvidia-h200-141gb", "H200", 141 * _GIB),
        GpuSpec("nvidia-b200", "B200", 180 * _GIB),
        GpuSpec("nvidia-gb200", "GB200", 186 * _GIB),
        GpuSpec("nvidia-rtx-pro-6000", "RTX PRO 6000", 96 * _GIB),
    )
}

# Accelerator-optimized machine types: name pattern -> (accelerator, GPUs from the name
# or a fixed count). G2 counts do not follow the name, hence the explicit table.
_G2_GPUS = {4: 1, 8: 1, 12: 1, 16: 1, 24: 2, 32: 1, 48: 4, 96: 8}
_BY_COUNT_SUFFIX: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^a2-highgpu-(\d+)g$"), "nvidia-tesla-a100"),
    (re.compile(r"^a2-megagpu-(\d+)g$"), "nvidia-tesla-a100"),
    (re.compile(r"^a2-ultragpu-(\d+)g$"), "nvidia-a100-80gb"),
    (re.compile(r"^a3-highgpu-(\d+)g$"), "nvidia-h100-80gb"),
    (re.compile(r"^a3-edgegpu-(\d+)g$"), "nvidia-h100-80gb"),
    (re.compile(r"^a3-megagpu-(\d+)g$"), "nvidia-h100-mega-80gb"),
    (re.compile(r"^a3-ultragpu-(\d+)g$"), "nvidia-h200-141gb"),
    (re.compile(r"^a4-highgpu-(\d+)g$"), "nvidia-b200"),
    (re.compile(r"^a4x-highgpu-(\d+)g$"), "nvidia-gb200"),
)
_G2 = re.compile(r"^g2-standard-(\d+)$")
_G4_GPUS = {48: 1, 96: 2, 192: 4, 384: 8}
_G4 = re.compile(r"^g4-standard-(\d+)$")


@dataclass(frozen=True)
class GpuAttachment:
    spec: GpuSpec | None  # None: an accelerator type this table does not know yet
    accelerator: str
    count: int


def from_machine_type(machine_type: str) -> GpuAttachment | None:
    """GPUs built into an accelerator-optimized machine type, e.g. a2-highgpu-4g -> 4xA100."""
    g2 = _G2.match(machine_type)
    if g2:
        count = _G2_GPUS.get(int(g2.group(1)))
        return (
            None if count is None else GpuAttachment(ACCELERATORS["nvidia-l4"], "nvidia-l4", count)
        )
    g4 = _G4.match(machine_type)
    if g4:
        count = _G4_GPUS.get(int(g4.group(1)))
        name = "nvidia-rtx-pro-6000"
        return None if count is None else GpuAttachment(ACCELERATORS[name], name, count)
    for pattern, accelerator in _BY_COUNT_SUFFIX:
        m = pattern.match(machine_type)
        if m:
            return GpuAttachment(ACCELERATORS[accelerator], accelerator, int(m.group(1)))
    return None


def from_accelerators(attached: list[tuple[str, int]]) -> GpuAttachment | None:
    """Summarise `guestAccelerators` (type name, count). A VM has one GPU model in practice."""
    attached = [(name, n) for name, n in attached if n > 0]
    if not attached:
        return None
    name = attached[0][0]
    total = sum(n for _, n in attached)
    return GpuAttachment(ACCELERATORS.get(name), name, total)


def tpu_spec(generation: tpus.Generation) -> GpuSpec:
    """A TPU generation as the accelerator of an instance: its chips are counted and judged
    as GPUs are (`gpu_count` chips of `gpu_model` "TPU v5e", HBM per chip)."""
    return GpuSpec(f"tpu-{generation.key}", generation.model, generation.hbm_mib_per_chip)


def from_tpu_machine_type(machine_type: str) -> GpuAttachment | None:
    """A GKE TPU node's chips (`ct5lp-hightpu-4t`: four TPU v5e chips)."""
    tpu = tpus.from_machine_type(machine_type)
    if tpu is None:
        return None
    spec = tpu_spec(tpu.generation)
    return GpuAttachment(spec, spec.accelerator, tpu.chips)


def detect(machine_type: str, attached: list[tuple[str, int]]) -> GpuAttachment | None:
    return (from_accelerators(attached) or from_machine_type(machine_type)
            or from_tpu_machine_type(machine_type))


def spec_for(model: str | None, memory_mib: int | None) -> GpuSpec | None:
    """The accelerator type behind an `Instance`'s (gpu_model, gpu_memory_mib)."""
    if model is None:
        return None
    matches = [
        s for s in ACCELERATORS.values() if s.model == model and not s.accelerator.endswith("-vws")
    ]
    if memory_mib is not None:
        matches = [s for s in matches if s.memory_mib == memory_mib] or matches
    return matches[0] if matches else None


def short_name(url_or_name: str) -> str:
    """`.../zones/us-central1-a/acceleratorTypes/nvidia-l4` -> `nvidia-l4`."""
    return url_or_name.rstrip("/").rsplit("/", 1)[-1]
