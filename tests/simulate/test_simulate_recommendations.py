"""The backtest of recommendations (#19): a fit recommended at the cut holds or breaks by
what the instance used after it; hand-made verdicts against the shipped g5 shapes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from costguard.recommend.shapes import aws_shapes
from costguard.simulate.recommendations import would_break
from costguard.telemetry.efficiency import Bottleneck, Efficiency

CUT = datetime(2026, 11, 16, tzinfo=UTC)
G5_XL = aws_shapes()["g5.xlarge"]  # 1 A10G of 22,888 MiB (24.0 GB), 4 vCPUs, 16 GiB
G5_16XL = aws_shapes()["g5.16xlarge"]  # 1 A10G, 64 vCPUs, 256 GiB


def verdict(used: int, *, vram_gb: float = 9.0, cpu: float | None = None, cpus: int = 48,
            mem_gib: float | None = None,
            bottleneck: Bottleneck = Bottleneck.LATENCY_BOUND) -> Efficiency:
    host: dict[str, Any] = {} if cpu is None else {"host_cpu_p95": cpu, "host_cpus": cpus}
    if mem_gib is not None:
        host["host_mem_peak_bytes"] = int(mem_gib * 2**30)
    return Efficiency(bottleneck=bottleneck, underused=True, evidence=(),
                      window_start=CUT, window_end=CUT + timedelta(days=7), hours=168,
                      span_hours=168, coverage=1.0, gpus_paid=4, gpus_used=used,
                      vram_peak_bytes=int(vram_gb * 1e9), **host)


def test_the_shapes_are_what_the_tests_assume() -> None:
    assert (G5_XL.gpus, G5_XL.gpu_memory_mib, G5_XL.vcpus, G5_XL.memory_mib) == (
        1, 22888, 4, 16384)
    assert (G5_16XL.gpus, G5_16XL.vcpus) == (1, 64)


def test_the_same_use_after_the_cut_holds() -> None:
    assert would_break(verdict(1), verdict(1, vram_gb=23.9, cpu=5.0, mem_gib=15.9),
                       G5_XL) == ()


def test_more_vram_more_gpus_more_cpu_or_memory_after_the_cut_break_it() -> None:
    broke = would_break(verdict(1), verdict(2, vram_gb=24.5, cpu=25.0, mem_gib=20.0), G5_XL)
    assert broke == (
        "2 GPUs used, g5.xlarge has 1",
        "VRAM peaked at 24.5 GB, g5.xlarge has 24.0 GB per GPU",
        "12.0 vCPUs busy (p95), g5.xlarge has 4",  # 25% of 48
        "host memory peaked at 20.0 GiB, g5.xlarge has 16 GiB",
    )


def test_a_starved_loader_given_fewer_gpus_on_purpose_holds_at_its_old_gpu_count() -> None:
    before = verdict(4, cpu=97.0, bottleneck=Bottleneck.DATA_LOADING)
    assert would_break(before, verdict(4, cpu=60.0), G5_16XL) == ()  # 28.8 of 64 vCPUs
    assert would_break(before, verdict(4, cpu=100.0, cpus=96), G5_16XL) == (
        "96.0 vCPUs busy (p95), g5.16xlarge has 64",)
