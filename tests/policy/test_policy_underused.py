"""The `underused:` condition (#19): read with its thresholds and refusals (never with
`stop` or another acting step, FILE:LINE:COL), and evaluated on the stored efficiency
verdict: not judged, not underused, the wrong bottleneck or too small a saving never
hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from costguard.errors import PolicyError
from costguard.model import Instance, InstanceState, Lifecycle
from costguard.policy.conditions import UnderusedCondition
from costguard.policy.evaluate import evaluate, underused_holds
from costguard.policy.load import parse_policy_text
from costguard.recommend.verdict import StoredVerdict
from costguard.telemetry.efficiency import Bottleneck, Efficiency

NOW = datetime(2026, 11, 16, 12, tzinfo=UTC)

POLICY = """\
policies:
  - name: underused
    filters: {{gpu: true}}
    condition:
      underused:
        window: 3d
        gpu_low: 30
        bottleneck: [latency-bound, healthy]
        min_monthly_savings_usd: 500
        cpu_high: 60
    actions:
      - notify: {{to: owner}}
{extra}"""


def verdict(bottleneck: Bottleneck, *, underused: bool = True, monthly: float = 3406.18,
            fit: str | None = "g5.xlarge") -> StoredVerdict:
    e = Efficiency(bottleneck=bottleneck, underused=underused,
                   evidence=("1 of 4 GPUs used (GPU 0) over 72.0 h",
                             "SM activity 18.4% mean on the GPUs used"),
                   window_start=NOW - timedelta(days=3), window_end=NOW, hours=72,
                   span_hours=72, coverage=1.0, gpus_paid=4, gpus_used=1)
    return StoredVerdict(e, NOW, "recsys", 272.26, fit, monthly,
                         "" if fit else "no cheaper type holds 1 GPU of 24 GB")


def cond(text: str = "") -> UnderusedCondition:
    policy = parse_policy_text(POLICY.format(extra=text), "p.yml").policies[0]
    assert policy.condition.underused is not None
    return policy.condition.underused


def test_the_thresholds_read_as_recommend_settings() -> None:
    c = cond()
    assert c.overrides() == {"window": timedelta(days=3), "gpu_low": 30.0, "cpu_high": 60.0}
    assert c.bottleneck == ("latency-bound", "healthy")
    assert UnderusedCondition().overrides() == {}  # all from recommend:


@pytest.mark.parametrize("step", ["stop: {grace: 15m}", "scale_in: {grace: 15m}"])
def test_underused_never_stops_and_says_where(step: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(POLICY.format(extra=f"      - {step}\n"), "p.yml")
    (error,) = caught.value.errors
    kind = step.split(":")[0]
    assert str(error) == (  # at its `actions:` key, where the step to remove is
        f"p.yml:11:5: policies[0].actions: condition.underused works with notify and tag "
        f"only, not "
        f"{kind}: costguard never stops a GPU for doing too little (it may be serving or "
        f"training); remove `{kind}`")


def test_every_step_that_acts_is_named_in_the_refusal() -> None:
    steps = "      - stop: {grace: 15m}\n      - scale_in: {grace: 15m}\n"
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(POLICY.format(extra=steps), "p.yml")
    (error,) = caught.value.errors
    assert error.message.endswith(
        "condition.underused works with notify and tag only, not scale_in, stop: costguard "
        "never stops a GPU for doing too little (it may be serving or training); remove "
        "`scale_in`, `stop`")


def test_tag_is_allowed_and_bad_thresholds_are_located() -> None:
    assert cond("      - tag: {set: {k: v}}\n").min_monthly_savings_usd == 500
    bad = POLICY.format(extra="").replace("window: 3d", "window: 6h").replace(
        "[latency-bound, healthy]", "[idle]")
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(bad, "p.yml")
    window, bottleneck = caught.value.errors
    assert (window.line, window.column) == (6, 17)
    assert "must be at least 1d (got 6h): a verdict needs at least a day" in window.message
    assert (bottleneck.line, bottleneck.column) == (8, 22)
    assert "'idle'" in bottleneck.message and "'latency-bound'" in bottleneck.message


def test_no_verdict_is_never_underused() -> None:
    assert underused_holds(cond(), None) == (
        False, "not judged yet (a verdict needs a day of readings): not underused")


@pytest.mark.parametrize("bottleneck", [Bottleneck.IDLE, Bottleneck.INSUFFICIENT_DATA,
                                        Bottleneck.SATURATED])
def test_a_verdict_not_underused_does_not_hold(bottleneck: Bottleneck) -> None:
    assert underused_holds(cond(), verdict(bottleneck, underused=False)) == (
        False, f"not underused ({bottleneck})")


def test_only_the_bottlenecks_named_hold() -> None:
    held, why = underused_holds(cond(), verdict(Bottleneck.DATA_LOADING))
    assert not held and why == "underused, but data-loading, not latency-bound or healthy"
    assert underused_holds(UnderusedCondition(), verdict(Bottleneck.DATA_LOADING))[0]


def test_the_saving_must_reach_the_minimum() -> None:
    assert underused_holds(cond(), verdict(Bottleneck.LATENCY_BOUND, monthly=499.99)) == (
        False, "underused, but its fit saves $500/month, under $500/month")
    assert underused_holds(cond(), verdict(Bottleneck.LATENCY_BOUND, monthly=0, fit=None)) == (
        False, "underused, but no cheaper fit, under $500/month")
    assert underused_holds(cond(), verdict(Bottleneck.LATENCY_BOUND, monthly=500))[0]


def test_a_finding_says_the_verdict_and_the_fit() -> None:
    policy = parse_policy_text(POLICY.format(extra=""), "p.yml").policies[0]
    inst = Instance(provider="aws", account="1", region="us-east-1", instance_id="i-1",
                    instance_type="g5.12xlarge", lifecycle=Lifecycle.ON_DEMAND,
                    state=InstanceState.RUNNING, launch_time=NOW - timedelta(days=9),
                    observed_at=NOW, gpu_count=4, gpu_model="A10G")
    found = evaluate(policy, inst, [], NOW, 5.672, verdict(Bottleneck.LATENCY_BOUND))
    assert found is not None and found.holds
    assert found.reason == ("underused: latency-bound: 1 of 4 GPUs used (GPU 0) over 72.0 h; "
                            "SM activity 18.4% mean on the GPUs used; g5.xlarge fits, "
                            "saving $3,406/month")
    missing = evaluate(policy, inst, [], NOW, 5.672)
    assert missing is not None and not missing.holds
