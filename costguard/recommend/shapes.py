"""What each GPU instance type is made of, per cloud: GPUs (model, memory, architecture),
vCPUs, host memory, CPU architecture, interconnect. The cheaper fit chooses among these.

AWS: the shipped `gpu_types.json` (DescribeInstanceTypes' GpuInfo, VCpuInfo, MemoryInfo,
ProcessorInfo and NetworkInfo as mirrored in moto's AWS-derived data; its `source` says
which rows were added by hand). GCP: the accelerator-optimized machine types of
`machine_types.json` with the accelerators' memory (`costguard.providers.gcp.gpus`); N1
VMs with attached GPUs are judged but not offered as a fit (their shape is chosen per VM).
The simulated cloud runs AWS's types.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

# GPU model -> (vendor, architecture, generation: newer is larger)
_ARCH: dict[str, tuple[str, str, int]] = {
    "K80": ("NVIDIA", "Kepler", 1), "M60": ("NVIDIA", "Maxwell", 2),
    "P4": ("NVIDIA", "Pascal", 3), "P100": ("NVIDIA", "Pascal", 3),
    "V100": ("NVIDIA", "Volta", 4), "T4": ("NVIDIA", "Turing", 5), "T4g": ("NVIDIA", "Turing", 5),
    "A100": ("NVIDIA", "Ampere", 6), "A10G": ("NVIDIA", "Ampere", 6),
    "A10": ("NVIDIA", "Ampere", 6), "L4": ("NVIDIA", "Ada", 7), "L40S": ("NVIDIA", "Ada", 7),
    "H100": ("NVIDIA", "Hopper", 8), "H200": ("NVIDIA", "Hopper", 8),
    "B200": ("NVIDIA", "Blackwell", 9), "B300": ("NVIDIA", "Blackwell", 9),
    "GB200": ("NVIDIA", "Blackwell", 9), "RTX PRO 6000": ("NVIDIA", "Blackwell", 9),
    "RTX PRO Server 6000": ("NVIDIA", "Blackwell", 9), "RTX PRO 4500": ("NVIDIA", "Blackwell", 9),
    "Radeon Pro V520": ("AMD", "RDNA", 1),
}
# Dense FP16/BF16 Tensor Core throughput of one GPU, in TFLOPS (without structured sparsity,
# which the datasheets print at twice these), from NVIDIA's datasheets: V100 SXM2 125 (Tesla
# V100 datasheet, "Tensor Performance"), T4 65 (T4 datasheet, "Mixed Precision FP16/FP32"),
# A100 312, A10 125, L4 121, L40S 362, H100 SXM and H200 989, B200 2,250 and GB200 2,500 per
# GPU (HGX/DGX B200 and GB200 NVL72 datasheets). The A10G (AWS's variant of the A10, no NVIDIA
# datasheet) has 70: fewer tensor cores active than the A10, as AWS's G5 material and
# third-party measurements (Baseten, "A10 vs A10G") give it. A model not listed has no
# figure: a fit to or from it cannot prove it holds the measured compute.
TENSOR_TFLOPS: dict[str, float] = {
    "V100": 125.0, "T4": 65.0, "T4g": 65.0, "A100": 312.0, "A10": 125.0, "A10G": 70.0,
    "L4": 121.0, "L40S": 362.0, "H100": 989.0, "H200": 989.0, "B200": 2250.0,
    "GB200": 2500.0,
}
# multi-GPU types whose GPUs talk over NVLink/NVSwitch (the rest go through PCIe)
_NVLINK_FAMILIES = frozenset({"p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200",
                              "p6-b300", "p6e-gb200", "a2", "a3", "a4", "a4x"})


@dataclass(frozen=True)
class Shape:
    provider: str
    instance_type: str
    gpus: int
    gpu_model: str  # short name, e.g. "A100"
    gpu_memory_mib: int  # per GPU
    vcpus: int
    memory_mib: int  # the host's
    cpu_arch: str = "x86_64"
    nvlink: bool = False  # GPUs linked by NVLink/NVSwitch (only meaningful for 2+ GPUs)
    efa: bool = False  # AWS Elastic Fabric Adapter (multi-node networking)

    @property
    def vendor(self) -> str:
        return _ARCH.get(self.gpu_model, ("?", "?", 0))[0]

    @property
    def architecture(self) -> str:
        return _ARCH.get(self.gpu_model, ("?", "unknown", 0))[1]

    @property
    def generation(self) -> int:
        return _ARCH.get(self.gpu_model, ("?", "?", 0))[2]

    @property
    def tflops(self) -> float | None:
        """One GPU's dense FP16 tensor throughput (TENSOR_TFLOPS), None where unknown."""
        return TENSOR_TFLOPS.get(self.gpu_model)

    @property
    def label(self) -> str:
        accelerators = f"{self.gpus}x {self.gpu_model} {self.gpu_memory_mib * 2**20 / 1e9:.0f} GB"
        if not self.vcpus:  # a TPU slice: its hosts come with its chips (recommend/tpu_fit)
            return accelerators
        return f"{accelerators}, {self.vcpus} vCPUs, {self.memory_mib / 1024:g} GiB"


def _short(model: str) -> str:
    for vendor in ("NVIDIA ", "AMD "):
        if model.startswith(vendor):
            return model[len(vendor):]
    return model


def _family(instance_type: str) -> str:
    return instance_type.split(".")[0] if "." in instance_type else instance_type.split("-")[0]


@cache
def aws_shapes() -> dict[str, Shape]:
    text = resources.files("costguard.providers.aws").joinpath("data/gpu_types.json")
    doc: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    out = {}
    for name, row in doc["types"].items():
        gpus = max(1, int(row["count"]))
        out[name] = Shape("aws", name, gpus, _short(str(row["model"])), int(row["memory_mib"]),
                          int(row["vcpus"]), int(row["host_memory_mib"]), str(row["cpu_arch"]),
                          gpus > 1 and _family(name) in _NVLINK_FAMILIES, bool(row["efa"]))
    return out


@cache
def gcp_shapes() -> dict[str, Shape]:
    from costguard.providers.gcp.catalog import machine_shapes
    from costguard.providers.gcp.gpus import ACCELERATORS

    out = {}
    for name, m in machine_shapes().items():
        gpu = ACCELERATORS.get(m.accelerator)
        if gpu is None or m.gpus <= 0:
            continue
        arch = "arm64" if name.startswith("a4x") else "x86_64"  # A4X: Grace CPUs
        out[name] = Shape("gcp", name, m.gpus, gpu.model, gpu.memory_mib, m.vcpus,
                          round(m.memory_gib * 1024), arch,
                          m.gpus > 1 and _family(name) in _NVLINK_FAMILIES)
    return out


def shapes(provider: str) -> dict[str, Shape]:
    """The instance types a fit may be chosen from on `provider` (the sim runs AWS's)."""
    if provider in ("aws", "sim"):
        return aws_shapes()
    if provider == "gcp":
        return gcp_shapes()
    return {}
