"""A TPU node's cheaper fit: a smaller slice of its generation holding the chips used,
priced by the chip-hour from the shipped TPU table; worked out by hand."""

from __future__ import annotations

import pytest

from costguard.model import Instance, InstanceState
from costguard.providers.gcp import tpus
from costguard.recommend.run import fit_of
from costguard.recommend.settings import RecommendSettings
from costguard.recommend.tpu_fit import sizes, tpu_fit, type_name
from costguard.telemetry.efficiency import Bottleneck
from tests.recommend.test_fit import START, judged


def node(accelerator_type: str) -> Instance:
    shape = tpus.shape(accelerator_type)
    assert shape is not None
    return Instance(provider="gcp", account="ml-prod", region="us-central1",
                    zone="us-central1-a", instance_id="7000", name="dev",
                    instance_type=accelerator_type, state=InstanceState.RUNNING,
                    launch_time=START, observed_at=START, gpu_count=shape.chips,
                    gpu_model=shape.generation.model,
                    gpu_memory_mib=shape.generation.hbm_mib_per_chip)


def never_priced(_inst: Instance) -> None:
    raise AssertionError("a TPU node is priced from the TPU table, not the instance lookup")


def test_two_busy_chips_of_a_v5e_8_fit_a_v5e_4() -> None:
    e = judged(8, 2, Bottleneck.LATENCY_BOUND, vram=5, cpu=3.0)
    fit = fit_of(node("v5litepod-8"), e, never_priced, RecommendSettings())  # type: ignore[arg-type]
    assert fit.to is not None and fit.to.instance_type == "v5litepod-4"
    # 8 x $1.20 = $9.60/h -> 4 x $1.20 = $4.80/h; the whole week ran: $4.80 x 730
    assert (fit.usd_per_hour, fit.to_usd_per_hour, fit.monthly_usd) == (9.6, 4.8, 3504.0)
    assert fit.needs == "2 TPU v5e chips of the same generation"
    assert fit.reason == "keeps 2 TPU v5e chips of 8"
    assert fit.to.label == "4x TPU v5e 17 GB"  # no host figures: they come with the chips
    risks = " | ".join(fit.risks)
    assert "drops 6 chips unused" in risks and "recreate the node as v5litepod-4" in risks


def test_one_busy_chip_of_a_v4_32_fits_one_host() -> None:
    e = judged(16, 1, Bottleneck.HEALTHY, vram=10, cpu=2.0, hours=84)
    fit = tpu_fit(node("v4-32"), e)
    assert fit is not None and fit.to is not None
    assert fit.to.instance_type == "v4-8"  # 4 chips, the smallest v4 slice
    # 16 x $3.22 = $51.52/h -> 4 x $3.22 = $12.88/h, half the week: x 730 x 0.5
    assert fit.monthly_usd == pytest.approx((51.52 - 12.88) * 730 * 0.5)


def test_every_chip_busy_or_no_smaller_slice_means_no_fit() -> None:
    busy = judged(8, 8, Bottleneck.SATURATED, vram=15, cpu=50.0, gpu_mean=97.0)
    assert tpu_fit(node("v5litepod-8"), busy).to is None  # type: ignore[union-attr]
    one = judged(1, 1, Bottleneck.LATENCY_BOUND, vram=1, cpu=1.0, gpu_mean=10.0)
    fit = tpu_fit(node("v5litepod-1"), one)
    assert fit is not None and fit.to is None
    assert fit.reason == "no smaller TPU v5e slice holds 1 chips"


def test_a_gpu_instance_is_not_a_tpu_fit() -> None:
    gpu = node("v5litepod-8").model_copy(update={"gpu_model": "A100",
                                                  "instance_type": "a2-highgpu-8g"})
    assert tpu_fit(gpu, judged(8, 1, Bottleneck.HEALTHY, vram=5, cpu=1.0)) is None


@pytest.mark.parametrize(("key", "below", "want"), [
    ("v5e", 8, [1, 4]), ("v5e", 32, [1, 4, 8, 16]), ("v6e", 16, [1, 4, 8]),
    ("v4", 64, [4, 8, 16, 32]), ("v5p", 4, []),
])
def test_slice_sizes(key: str, below: int, want: list[int]) -> None:
    gen = next(g for g in tpus.generations() if g.key == key)
    assert sizes(gen, below) == want


def test_type_names_count_as_each_generation_counts() -> None:
    by_key = {g.key: g for g in tpus.generations()}
    assert type_name(by_key["v5e"], 4) == "v5litepod-4"
    assert type_name(by_key["v4"], 4) == "v4-8"
    assert type_name(by_key["v5p"], 16) == "v5p-32"
    assert type_name(by_key["tpu7x"], 4) is None  # its naming is not confirmed
