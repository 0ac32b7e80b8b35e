"""Which instances a policy selects and when its condition holds, one rule per test, each
tried against an instance it must select and one it must reject (found by mutation testing:
see MUTATION.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from costguard.model import (
    GpuMinute,
    Instance,
    InstanceState,
    Lifecycle,
    Owner,
    OwnerKind,
    TelemetrySource,
    Verdict,
)
from costguard.policy.conditions import Condition
from costguard.policy.evaluate import check_condition, evaluate, matches
from costguard.policy.load import parse_policy_text
from costguard.policy.schema import Policy

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def box(**update: Any) -> Instance:
    base = Instance(provider="aws", account="111122223333", region="us-east-1",
                    instance_id="i-1", instance_type="p4d.24xlarge", state=InstanceState.RUNNING,
                    gpu_count=8, launch_time=NOW - timedelta(days=2), observed_at=NOW,
                    tags={"team": "ml", "env": "dev"})
    return base.model_copy(update=update)


def policy(body: str) -> Policy:
    text = "policies:\n  - name: p\n" + "".join(f"    {line}\n" for line in body.splitlines())
    return parse_policy_text(text).policies[0]


def selects(body: str, inst: Instance) -> bool:
    p = policy(body + "\ncondition: {running_longer_than: 1h}\nactions: [{notify: {to: owner}}]")
    return matches(p, inst, NOW)


# -- filters: each one rejects what it should ------------------------------------------------------

def test_the_providers_restriction_rejects_another_cloud() -> None:
    assert selects("providers: [aws]", box())
    assert not selects("providers: [gcp]", box())
    assert selects("providers: [gcp, aws]", box())


def test_no_filters_select_everything() -> None:
    assert selects("", box()) and selects("", box(gpu_count=0, state=InstanceState.STOPPED))


@pytest.mark.parametrize(("flt", "yes", "no"), [
    ("gpu: true", {}, {"gpu_count": 0}),
    ("gpu: false", {"gpu_count": 0}, {}),
    ("state: running", {}, {"state": InstanceState.STOPPED}),
    ("state: [stopped, running]", {"state": InstanceState.STOPPED},
     {"state": InstanceState.PENDING}),
    ("instance_type: [g5.*, p4d.24xlarge]", {}, {"instance_type": "p4de.24xlarge"}),
    ("instance_type: 'p4d.*'", {}, {"instance_type": "P4D.24xlarge"}),
    ("family: [p4d]", {}, {"instance_type": "p4de.24xlarge"}),
    ("lifecycle: spot", {"lifecycle": Lifecycle.SPOT}, {}),
    ("lifecycle: on-demand", {}, {"lifecycle": Lifecycle.SPOT}),
    ("accounts: ['111122223333']", {}, {"account": "444455556666"}),
    ("regions: [us-east-1]", {}, {"region": "us-west-2"}),
    ("tags: {present: [team]}", {}, {"tags": {"env": "dev"}}),
    ("tags: {present: [team, env]}", {}, {"tags": {"team": "ml"}}),
    ("tags: {absent: [keep]}", {}, {"tags": {"keep": ""}}),
    ("tags: {values: {env: [dev, test]}}", {"tags": {"env": "test"}}, {"tags": {"env": "prod"}}),
    ("tags: {values: {env: dev}}", {}, {"tags": {"team": "ml"}}),
    ("managed: false", {}, {"owner": Owner(kind=OwnerKind.ASG, name="g")}),
    ("managed: true", {"owner": Owner(kind=OwnerKind.ASG, name="g")}, {}),
    ("owner_kind: [asg, mig]", {"owner": Owner(kind=OwnerKind.MIG, name="g")},
     {"owner": Owner(kind=OwnerKind.EKS, name="g")}),
    ("owner_kind: asg", {"owner": Owner(kind=OwnerKind.ASG, name="g")}, {}),
])
def test_each_filter_selects_what_it_names_and_rejects_the_rest(
        flt: str, yes: dict[str, Any], no: dict[str, Any]) -> None:
    body = f"filters: {{{flt}}}"
    assert selects(body, box(**yes)), f"{flt} should select {yes}"
    assert not selects(body, box(**no)), f"{flt} should reject {no}"


def test_every_filter_must_pass() -> None:
    body = "filters: {gpu: true, regions: [us-east-1], tags: {present: [team]}}"
    assert selects(body, box())
    assert not selects(body, box(region="eu-west-1"))
    assert not selects(body, box(tags={}))


def test_the_age_window_is_older_than_inclusive_younger_than_exclusive() -> None:
    older = "filters: {age: {older_than: 2d}}"
    assert selects(older, box())  # exactly two days old
    assert not selects(older, box(launch_time=NOW - timedelta(days=2) + timedelta(seconds=1)))
    younger = "filters: {age: {younger_than: 2d}}"
    assert not selects(younger, box())  # exactly two days old is not younger
    assert selects(younger, box(launch_time=NOW - timedelta(days=1)))
    window = "filters: {age: {older_than: 1h, younger_than: 3d}}"
    assert selects(window, box())
    assert not selects(window, box(launch_time=NOW - timedelta(days=4)))
    assert not selects(window, box(launch_time=NOW - timedelta(minutes=30)))


# -- conditions ------------------------------------------------------------------------------------

def idle_minutes(value: float, gpus: int = 1, minutes: int = 45) -> list[GpuMinute]:
    return [GpuMinute(provider="aws", instance_id="i-1", gpu_index=g,
                      minute=NOW - timedelta(minutes=minutes - m), source=TelemetrySource.AGENT,
                      sm_mean=value, sm_max=value) for m in range(minutes) for g in range(gpus)]


def test_idle_holds_on_an_idle_verdict_only() -> None:
    cond = Condition.model_validate({"idle": {"below": 5, "for": "45m"}})
    holds, reasons, verdict = check_condition(cond, box(gpu_count=1), idle_minutes(0.0), NOW, 3.0)
    assert holds and verdict is not None and verdict.verdict is Verdict.IDLE
    assert reasons == ["idle: SM activity peaked at 0.0% over 45 min on 1 GPU"]
    busy = check_condition(cond, box(gpu_count=1), idle_minutes(50.0), NOW, 3.0)
    assert busy[0] is False and busy[1][0].startswith("not idle (active): ")
    dark = check_condition(cond, box(gpu_count=1), [], NOW, 3.0)
    assert dark[0] is False and dark[1][0].startswith("not idle (no-data): ")


def test_idle_judges_every_gpu_the_instance_has() -> None:
    cond = Condition.model_validate({"idle": {"below": 5, "for": "45m"}})
    one_of_eight = check_condition(cond, box(gpu_count=8), idle_minutes(0.0), NOW, 3.0)
    assert one_of_eight[0] is False
    assert check_condition(cond, box(gpu_count=8), idle_minutes(0.0, gpus=8), NOW, 3.0)[0]


def test_idle_passes_the_policys_threshold_signal_and_coverage_to_the_classifier() -> None:
    loose = Condition.model_validate({"idle": {"below": 60, "for": "30m"}})
    assert check_condition(loose, box(gpu_count=1), idle_minutes(50.0, minutes=30), NOW, 1.0)[0]
    sparse = Condition.model_validate({"idle": {"for": "45m", "min_coverage": 0.5}})
    assert check_condition(sparse, box(gpu_count=1), idle_minutes(0.0, minutes=23), NOW, 1.0)[0]
    util = Condition.model_validate({"idle": {"for": "45m", "signal": "util_gpu"}})
    held, reasons, _ = check_condition(util, box(gpu_count=1), idle_minutes(0.0), NOW, 1.0)
    assert not held and "util_gpu covers 0%" in reasons[0]


def test_idle_only_looks_at_its_own_window() -> None:
    cond = Condition.model_validate({"idle": {"for": "45m"}})
    old_busy = [m.model_copy(update={"minute": m.minute - timedelta(hours=1)})
                for m in idle_minutes(90.0)]
    assert check_condition(cond, box(gpu_count=1), old_busy + idle_minutes(0.0), NOW, 1.0)[0]


@pytest.mark.parametrize("source", [s for s in TelemetrySource if s is not TelemetrySource.AGENT])
def test_agent_evidence_counts_the_agents_minutes_only(source: TelemetrySource) -> None:
    strict = Condition.model_validate({"idle": {"for": "45m", "evidence": "agent"}})
    cloud = [m.model_copy(update={"source": source}) for m in idle_minutes(0.0)]
    assert check_condition(Condition.model_validate({"idle": {"for": "45m"}}),
                           box(gpu_count=1), cloud, NOW, 1.0)[0]
    held, reasons, verdict = check_condition(strict, box(gpu_count=1), cloud, NOW, 1.0)
    assert not held and verdict is not None and verdict.verdict is Verdict.NO_DATA
    assert reasons[0].startswith("not idle (no-data): ")
    assert reasons[0].endswith("; 45 cloud readings not counted (idle evidence: the agent's "
                               "only)")
    # the agent's minutes are evidence; a cloud's minutes do not fill the agent's gaps
    agent = idle_minutes(0.0)
    assert check_condition(strict, box(gpu_count=1), agent, NOW, 1.0)[0]
    half = agent[:22] + cloud[22:]
    held, reasons, _ = check_condition(strict, box(gpu_count=1), half, NOW, 1.0)
    assert not held and reasons[0].endswith("; 23 cloud readings not counted (idle evidence: "
                                            "the agent's only)")
    assert check_condition(Condition.model_validate({"idle": {"for": "45m"}}),
                           box(gpu_count=1), half, NOW, 1.0)[0]
    # one reading is one, not "readings"; two are two
    for n, words in ((1, "; 1 cloud reading not counted ("), (2, "; 2 cloud readings not ")):
        held, reasons, _ = check_condition(strict, box(gpu_count=1), agent[:20] + cloud[-n:],
                                           NOW, 1.0)
        assert not held and words in reasons[0], reasons
    # nothing added where nothing was left out: the agent's own minutes, or any evidence
    for cond, minutes in ((strict, idle_minutes(50.0)),
                          (Condition.model_validate({"idle": {"for": "45m"}}), cloud[:10])):
        held, reasons, verdict = check_condition(cond, box(gpu_count=1), minutes, NOW, 1.0)
        assert not held and verdict is not None
        assert reasons == [f"not idle ({verdict.verdict}): {verdict.evidence}"]


def test_a_gpu_less_instance_is_judged_as_one_gpu() -> None:
    cond = Condition.model_validate({"idle": {"for": "45m"}})
    assert check_condition(cond, box(gpu_count=0), idle_minutes(0.0), NOW, 1.0)[0]


def test_running_longer_than_counts_from_launch_and_needs_the_instance_running() -> None:
    cond = Condition.model_validate({"running_longer_than": "2d"})
    assert check_condition(cond, box(), [], NOW, 1.0)[:2] == (True, ["running for 2.0 days"])
    young = box(launch_time=NOW - timedelta(days=2) + timedelta(seconds=1))
    assert check_condition(cond, young, [], NOW, 1.0)[:2] == (False, ["not running long enough"])
    stopped = box(state=InstanceState.STOPPED)
    assert check_condition(cond, stopped, [], NOW, 1.0)[:2] == (
        False, ["not running long enough"])
    hours = Condition.model_validate({"running_longer_than": "1h"})
    recent = box(launch_time=NOW - timedelta(hours=47, minutes=54))
    assert check_condition(hours, recent, [], NOW, 1.0)[1] == ["running for 47.9 h"]


def test_missing_tags_holds_when_any_key_is_absent_or_empty() -> None:
    cond = Condition.model_validate({"missing_tags": ["team", "owner"]})
    assert check_condition(cond, box(), [], NOW, 1.0)[:2] == (True, ["missing tags: owner"])
    empty = box(tags={"team": "", "owner": "x"})
    assert check_condition(cond, empty, [], NOW, 1.0)[:2] == (True, ["missing tags: team"])
    none = box(tags={})
    assert check_condition(cond, none, [], NOW, 1.0)[1] == ["missing tags: team, owner"]
    full = box(tags={"team": "ml", "owner": "ana"})
    assert check_condition(cond, full, [], NOW, 1.0)[:2] == (False, ["has the required tags"])


@pytest.mark.parametrize(("threshold", "usd_per_hour", "holds"), [
    ({"usd_per_hour": 10}, 10.01, True), ({"usd_per_hour": 10}, 10.0, False),
    ({"usd_per_hour": 10}, 3.0, False), ({"usd_per_day": 240}, 10.01, True),
    ({"usd_per_day": 240}, 10.0, False), ({"usd_per_day": 240}, 9.0, False),
])
def test_cost_over_holds_strictly_above_the_threshold(
        threshold: dict[str, float], usd_per_hour: float, holds: bool) -> None:
    cond = Condition.model_validate({"cost_over": threshold})
    got = check_condition(cond, box(), [], NOW, usd_per_hour)[:2]
    assert got == ((True, [f"costs ${usd_per_hour:,.2f}/h"]) if holds
                   else (False, ["cost under threshold"]))


def test_cost_over_prints_thousands() -> None:
    cond = Condition.model_validate({"cost_over": {"usd_per_hour": 10}})
    assert check_condition(cond, box(), [], NOW, 1234.5)[1] == ["costs $1,234.50/h"]


def test_every_condition_given_must_hold_and_the_first_miss_says_why() -> None:
    cond = Condition.model_validate({"running_longer_than": "1h", "missing_tags": ["owner"],
                                     "cost_over": {"usd_per_hour": 5}})
    assert check_condition(cond, box(), [], NOW, 20.0)[:2] == (
        True, ["running for 2.0 days", "missing tags: owner", "costs $20.00/h"])
    assert check_condition(cond, box(), [], NOW, 1.0)[:2] == (False, ["cost under threshold"])
    tagged = box(tags={"owner": "ana"})
    assert check_condition(cond, tagged, [], NOW, 20.0)[:2] == (False, ["has the required tags"])


# -- evaluate --------------------------------------------------------------------------------

def test_evaluate_skips_what_the_filters_reject_and_reports_the_rest() -> None:
    p = policy("filters: {gpu: true}\ncondition: {cost_over: {usd_per_hour: 5}}\n"
               "actions: [{notify: {to: owner}}]")
    assert evaluate(p, box(gpu_count=0), [], NOW, 20.0) is None
    inst = box()
    finding = evaluate(p, inst, [], NOW, 20.0)
    assert finding is not None and finding.holds and finding.policy is p
    assert finding.instance is inst
    assert (finding.reason, finding.evidence, finding.usd_per_hour) == (
        "costs $20.00/h", "costs $20.00/h", 20.0)
    assert finding.classification is None
    cheap = evaluate(p, box(), [], NOW, 1.0)
    assert cheap is not None and not cheap.holds and cheap.reason == "cost under threshold"


def test_an_idle_finding_carries_the_classifiers_evidence() -> None:
    p = policy("condition: {idle: {for: 45m}, cost_over: {usd_per_hour: 1}}\n"
               "actions: [{notify: {to: owner}}]")
    finding = evaluate(p, box(gpu_count=1), idle_minutes(0.0), NOW, 4.0)
    assert finding is not None and finding.holds
    assert finding.evidence == "SM activity peaked at 0.0% over 45 min on 1 GPU"
    assert finding.reason == ("idle: SM activity peaked at 0.0% over 45 min on 1 GPU; "
                              "costs $4.00/h")
    assert finding.classification is not None


def test_a_finding_without_idle_joins_its_reasons_as_evidence() -> None:
    p = policy("condition: {running_longer_than: 1h, cost_over: {usd_per_hour: 5}}\n"
               "actions: [{notify: {to: owner}}]")
    finding = evaluate(p, box(), [], NOW, 20.0)
    assert finding is not None
    assert finding.evidence == finding.reason == "running for 2.0 days; costs $20.00/h"


def test_evaluate_applies_the_age_filter_at_the_time_it_is_given() -> None:
    p = policy("filters: {age: {older_than: 1d}}\ncondition: {cost_over: {usd_per_hour: 5}}\n"
               "actions: [{notify: {to: owner}}]")
    assert evaluate(p, box(), [], NOW, 20.0) is not None
    assert evaluate(p, box(), [], NOW - timedelta(days=1, seconds=1), 20.0) is None
