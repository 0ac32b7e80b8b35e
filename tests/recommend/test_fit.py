"""The cheaper fit, with answers worked out by hand from the shipped catalogs
(`providers/aws/data/gpu_types.json` shapes, `ec2_gpu_prices.json` us-east-1 prices)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from costguard.costs.pricing import table_price
from costguard.model import GpuSignal, Instance, InstanceState, Lifecycle, PriceQuote
from costguard.recommend.fit import cheaper_fit
from costguard.recommend.settings import RecommendSettings
from costguard.recommend.shapes import aws_shapes, gcp_shapes
from costguard.telemetry.efficiency import Bottleneck, Efficiency

START = datetime(2026, 11, 2, tzinfo=UTC)
GIB = 2**30


def instance(itype: str, provider: str = "aws", region: str = "us-east-1",
             lifecycle: Lifecycle = Lifecycle.ON_DEMAND) -> Instance:
    spec = (aws_shapes() if provider != "gcp" else gcp_shapes())[itype]
    return Instance(provider=provider, account="111122223333", region=region,  # type: ignore[arg-type]
                    instance_id="i-0abc", instance_type=itype, lifecycle=lifecycle,
                    state=InstanceState.RUNNING, launch_time=START, observed_at=START,
                    gpu_count=spec.gpus, gpu_model=spec.gpu_model)


def judged(gpus: int, used: int, bottleneck: Bottleneck, *, vram: float, cpu: float | None,
           mem_gib: float | None = 20, gpu_mean: float = 90.0, hours: float = 168) -> Efficiency:
    host: dict[str, Any] = {} if cpu is None else {
        "host_cpu_p95": cpu, "host_mem_peak_bytes": int(mem_gib * GIB) if mem_gib else None}
    return Efficiency(
        bottleneck=bottleneck, underused=used < gpus or gpu_mean < 40, evidence=(),
        window_start=START, window_end=START + timedelta(days=7), hours=hours,
        span_hours=168, coverage=1.0,
        signal=GpuSignal.SM_ACTIVE, gpus_paid=gpus, gpus_used=used,
        used_gpus=tuple(range(used)), gpu_mean=gpu_mean, vram_peak_bytes=int(vram * 1e9),
        **host)


ANY = RecommendSettings(architectures="any")


def test_a_p4d_with_one_busy_gpu_at_30_gb_fits_the_cheapest_one_gpu_type_of_36_gb() -> None:
    e = judged(8, 1, Bottleneck.HEALTHY, vram=30, cpu=2.0)
    fit = cheaper_fit(instance("p4d.24xlarge"), e, table_price, ANY)
    # 1 GPU >= 36 GB (34,333 MiB), >= 3 vCPUs (2% of 96 x 1.2), >= 24 GiB: the L40S of
    # g6e.xlarge (45,776 MiB, 4 vCPUs, 32 GiB) at $1.861/h; p4d.24xlarge is $21.957642/h
    assert fit.to is not None and fit.to.instance_type == "g6e.xlarge"
    assert fit.usd_per_hour == 21.957642 and fit.to_usd_per_hour == 1.861
    assert fit.monthly_usd == 14670.55  # (21.957642 - 1.861) x 730, ran the whole week
    risks = " | ".join(fit.risks)
    assert "drops 7 GPUs unused" in risks and "Ampere -> Ada" in risks
    assert "no EFA" in risks and "runs at another speed" in risks
    assert "VRAM peak 30.0 GB leaves" in risks


def test_the_same_p4d_under_the_default_finds_no_ampere_type() -> None:
    e = judged(8, 1, Bottleneck.HEALTHY, vram=30, cpu=2.0)
    fit = cheaper_fit(instance("p4d.24xlarge"), e, table_price)
    assert fit.to is None
    assert fit.reason == ("no cheaper Ampere type holds it "
                          "(recommend.architectures: any widens the search)")
    newer = cheaper_fit(instance("p4d.24xlarge"), e, table_price,
                        RecommendSettings(architectures="same-or-newer"))
    assert newer.to is not None and newer.to.instance_type == "g6e.xlarge"


def test_more_host_cpu_needs_a_larger_g6e() -> None:
    # 10% of 96 vCPUs at p95 -> 12 vCPUs with headroom, 40 GiB peak -> 48 GiB:
    # g6e.xlarge (4/32) and g6e.2xlarge (8/64) fall short; g6e.4xlarge (16/128) $3.00424
    e = judged(8, 1, Bottleneck.HEALTHY, vram=30, cpu=10.0, mem_gib=40)
    fit = cheaper_fit(instance("p4d.24xlarge"), e, table_price, ANY)
    assert fit.to is not None and fit.to.instance_type == "g6e.4xlarge"
    assert fit.needs == ("1 GPU with >= 36.0 GB each, >= 281 TFLOPS (FP16 tensor) in all, "
                         ">= 12 vCPUs, >= 48 GiB")  # one A100 90% busy: 0.9 x 312


def test_eight_busy_gpus_of_eight_get_no_recommendation() -> None:
    e = judged(8, 8, Bottleneck.HEALTHY, vram=30, cpu=20.0)
    fit = cheaper_fit(instance("p4d.24xlarge"), e, table_price, ANY)
    assert fit.to is None and fit.monthly_usd == 0 and "keep them" in fit.reason


def test_a_9_gb_inference_server_on_a_v100_moves_to_a_t4() -> None:
    # latency-bound, 9 GB peak -> >= 10.1 GiB: V100 (Volta) has no cheaper Volta type; the
    # same-or-newer cheapest 1-GPU x86 type with >= 10,300 MiB is g4dn.xlarge (T4 16 GB)
    e = judged(1, 1, Bottleneck.LATENCY_BOUND, vram=9, cpu=8.0, mem_gib=6, gpu_mean=6.0)
    same = cheaper_fit(instance("p3.2xlarge"), e, table_price)
    assert same.to is None and "no cheaper Volta type" in same.reason
    fit = cheaper_fit(instance("p3.2xlarge"), e, table_price,
                      RecommendSettings(architectures="same-or-newer"))
    assert fit.to is not None and fit.to.instance_type == "g4dn.xlarge"
    assert fit.monthly_usd == round((3.06 - 0.526) * 730, 2)
    assert fit.reason.startswith("a T4 holds the measured peak")


def test_a_starved_loader_gets_more_cpu_per_gpu_never_a_smaller_gpu() -> None:
    # g5.12xlarge: 4 A10G, 48 vCPUs (12 per GPU), CPUs pegged (p95 97%): needs
    # >= 56 vCPUs (48 x 0.97 x 1.2) and > 12 per GPU, on A10G: g5.16xlarge (1 GPU, 64 vCPUs,
    # $4.096) beats g5.24xlarge (4 GPUs, 96 vCPUs, $8.144)
    e = judged(4, 4, Bottleneck.DATA_LOADING, vram=5, cpu=97.0, mem_gib=60, gpu_mean=8.0)
    fit = cheaper_fit(instance("g5.12xlarge"), e, table_price, ANY)
    assert fit.to is not None and fit.to.instance_type == "g5.16xlarge"
    assert fit.to.gpu_model == "A10G"
    assert fit.needs == ("up to 4 A10G GPUs, >= 22 TFLOPS (FP16 tensor) in all, >= 56 vCPUs, "
                         ">= 72 GiB, > 12 vCPUs per GPU")
    assert "runs on 1 GPU instead of the 4 used" in " | ".join(fit.risks)
    assert fit.reason == "64 vCPUs per GPU instead of 12: the GPU stops waiting for data"
    assert fit.monthly_usd == round((5.672 - 4.096) * 730, 2)


def test_a_starved_loader_on_the_largest_cpu_per_gpu_gets_advice_not_a_type() -> None:
    e = judged(8, 8, Bottleneck.DATA_LOADING, vram=30, cpu=99.0, mem_gib=100, gpu_mean=10.0)
    fit = cheaper_fit(instance("p4d.24xlarge"), e, table_price, ANY)
    assert fit.to is None and fit.reason.startswith("no A100 type offers more vCPUs per GPU")


def test_without_host_figures_the_fit_keeps_cpu_and_memory_per_gpu_and_says_so() -> None:
    # g5.12xlarge (48 vCPUs, 192 GiB) with 1 GPU of 4 used: 12 vCPUs and 48 GiB assumed;
    # g5.xlarge (4/16) and g5.2xlarge (8/32) fall short, g5.4xlarge (16/64) $1.624 fits
    e = judged(4, 1, Bottleneck.CAUSE_UNKNOWN, vram=5, cpu=None, gpu_mean=20.0)
    fit = cheaper_fit(instance("g5.12xlarge"), e, table_price)
    assert fit.to is not None and fit.to.instance_type == "g5.4xlarge"
    assert any("not measured: assumed proportional" in r for r in fit.risks)


def test_the_fit_never_crosses_cpu_architectures() -> None:
    # g5g (Graviton, T4g) is cheap but arm64: an x86 g4dn's job does not run there
    e = judged(1, 1, Bottleneck.LATENCY_BOUND, vram=2, cpu=5.0, mem_gib=2, gpu_mean=3.0)
    fit = cheaper_fit(instance("g4dn.2xlarge"), e, table_price)
    assert fit.to is not None and fit.to.cpu_arch == "x86_64"
    assert fit.to.instance_type == "g4dn.xlarge"


def test_the_prices_come_from_the_lookup_handed_in() -> None:
    def lookup(inst: Instance) -> PriceQuote | None:
        if inst.instance_type == "g6e.xlarge":
            return PriceQuote(usd_per_hour=99.0, source="negotiated")
        return table_price(inst)

    e = judged(8, 1, Bottleneck.HEALTHY, vram=30, cpu=2.0)
    fit = cheaper_fit(instance("p4d.24xlarge"), e, lookup, ANY)
    assert fit.to is not None and fit.to.instance_type == "g6e.2xlarge"  # $2.24208


def test_part_time_hours_scale_the_monthly_dollars() -> None:
    e = judged(8, 1, Bottleneck.HEALTHY, vram=30, cpu=2.0, hours=84)  # half the week
    fit = cheaper_fit(instance("p4d.24xlarge"), e, table_price, ANY)
    assert fit.monthly_usd == round((21.957642 - 1.861) * 730 / 2, 2)


def test_gcp_a2_with_one_gpu_of_eight_used_moves_to_a2_highgpu_1g() -> None:
    e = judged(8, 1, Bottleneck.HEALTHY, vram=30, cpu=3.0, mem_gib=30)
    fit = cheaper_fit(instance("a2-highgpu-8g", "gcp", "us-central1"), e, table_price)
    assert fit.to is not None and fit.to.instance_type == "a2-highgpu-1g"
    assert fit.usd_per_hour is not None and fit.to_usd_per_hour is not None
    assert fit.to_usd_per_hour == pytest.approx(fit.usd_per_hour / 8, rel=0.01)


@pytest.mark.parametrize("bottleneck", [Bottleneck.IDLE, Bottleneck.INSUFFICIENT_DATA,
                                        Bottleneck.SATURATED])
def test_no_fit_where_there_is_nothing_to_fit(bottleneck: Bottleneck) -> None:
    e = judged(8, 1, bottleneck, vram=30, cpu=2.0)
    fit = cheaper_fit(instance("p4d.24xlarge"), e, table_price, ANY)
    assert fit.to is None and fit.monthly_usd == 0


def test_a_type_outside_the_catalog_says_so() -> None:
    inst = instance("g5.xlarge").model_copy(update={"instance_type": "x9.huge"})
    fit = cheaper_fit(inst, judged(1, 1, Bottleneck.LATENCY_BOUND, vram=1, cpu=1.0),
                      table_price)
    assert fit.current is None and "not in costguard's aws shape catalog" in fit.reason


def test_a_sagemaker_notebook_s_ml_type_is_judged_and_not_fitted() -> None:
    inst = instance("g5.xlarge").model_copy(update={"instance_type": "ml.g5.xlarge"})
    fit = cheaper_fit(inst, judged(1, 1, Bottleneck.LATENCY_BOUND, vram=1, cpu=1.0),
                      table_price)
    assert fit.to is None and fit.monthly_usd == 0
    assert "SageMaker ML type" in fit.reason and "no cheaper ML type" in fit.reason


def test_a_busy_a100_never_fits_on_an_a10g_that_merely_holds_its_vram() -> None:
    # the second-hour report: one A100 of a p4d 92.5% busy was sent to a single A10G to
    # "save $15,294.70/month", because the A10G held its 1.6 GB
    e = judged(8, 1, Bottleneck.UNUSED_GPUS, vram=1.6, cpu=3.0, gpu_mean=92.5)
    fit = cheaper_fit(instance("p4d.24xlarge"), e, table_price, ANY)
    assert fit.to is not None and fit.to.gpu_model != "A10G"
    assert fit.to.tflops is not None and fit.to.gpus * fit.to.tflops >= 0.925 * 312
    assert ">= 289 TFLOPS (FP16 tensor) in all" in fit.needs
    assert any("it would be" in r and "busy" in r for r in fit.risks)
    # under the default (the same architecture) no Ampere type holds it, and none is made up
    same = cheaper_fit(instance("p4d.24xlarge"), e, table_price)
    assert same.to is None


def test_a_light_job_still_moves_to_a_smaller_gpu() -> None:
    # 1 A10G of 4 at 18%: 13 TFLOPS of work fits one A10G (70)
    e = judged(4, 1, Bottleneck.LATENCY_BOUND, vram=1.6, cpu=6.0, gpu_mean=18.4, mem_gib=10)
    fit = cheaper_fit(instance("g5.12xlarge"), e, table_price)
    assert fit.to is not None and fit.to.instance_type == "g5.xlarge"


def test_a_provider_without_instance_types_points_to_the_pods_fit() -> None:
    inst = instance("g5.xlarge").model_copy(update={"provider": "k8s",
                                                    "instance_type": "Deployment"})
    fit = cheaper_fit(inst, judged(2, 1, Bottleneck.UNUSED_GPUS, vram=1, cpu=1.0),
                      table_price)
    assert fit.to is None and "costguard recommend --by pod" in fit.reason
