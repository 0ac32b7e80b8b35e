"""The safety rules one at a time: protection, snoozes, caps and the last re-check before a
call, each at the edge where a slip would let costguard touch what it must not (found by
mutation testing: see MUTATION.md). The end-to-end properties are in test_safety_properties.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from costguard.actions.safety import (
    CycleBudget,
    batch_verdict,
    check_caps,
    is_protected,
    owner_advice,
    pet_refusal,
    protects,
    recheck,
    skip_reason,
    snooze_limit,
    snoozed_until,
)
from costguard.errors import ProviderError
from costguard.model import Instance, InstanceState, Owner, OwnerKind
from costguard.policy.schema import Limits

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
ASG = Owner(kind=OwnerKind.ASG, name="trainers", via="tag aws:autoscaling:groupName")


def box(**update: Any) -> Instance:
    base = Instance(provider="aws", account="111122223333", region="us-east-1",
                    instance_id="i-1", instance_type="p4d.24xlarge", state=InstanceState.RUNNING,
                    gpu_count=8, launch_time=NOW - timedelta(days=2), observed_at=NOW)
    return base.model_copy(update=update)


# -- protect -------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["true", "yes", "1", "", "  ", "anything", "FALSEY"])
def test_protect_with_any_value_but_an_explicit_no_protects(value: str) -> None:
    assert protects({"costguard:protect": value})


@pytest.mark.parametrize("value", ["false", "0", "no", "off", " False ", "OFF"])
def test_protect_false_0_no_off_does_not_protect(value: str) -> None:
    assert not protects({"costguard:protect": value})


def test_no_protect_tag_does_not_protect() -> None:
    assert not protects({"team": "ml"})
    assert not is_protected(box())


def test_protect_on_the_group_protects_every_member() -> None:
    group = ASG.model_copy(update={"tags": {"costguard:protect": "true"}})
    assert is_protected(box(owner=group))
    assert not is_protected(box(owner=ASG))
    assert is_protected(box(owner=ASG, tags={"costguard:protect": "1"}))


# -- snooze --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "expected"), [
    ("2026-11-25T08:00:00Z", datetime(2026, 11, 25, 8, 0, tzinfo=UTC)),
    ("2026-11-25T09:30:00+01:00", datetime(2026, 11, 25, 8, 30, tzinfo=UTC)),
    ("2026-11-25T08:00:00", datetime(2026, 11, 25, 8, 0, tzinfo=UTC)),  # naive: UTC
    (" 2026-11-25T08:00:00Z ", datetime(2026, 11, 25, 8, 0, tzinfo=UTC)),
    ("2026-11-23t14-05z", datetime(2026, 11, 23, 14, 5, tzinfo=UTC)),  # a GCE label value
    ("2026-11-23T14-05-09Z", datetime(2026, 11, 23, 14, 5, 9, tzinfo=UTC)),
])
def test_a_snooze_tag_reads_as_a_utc_time(raw: str, expected: datetime) -> None:
    until = snoozed_until(box(tags={"costguard:snooze-until": raw}))
    assert until == expected and until.utcoffset() == timedelta(0)


@pytest.mark.parametrize("raw", ["", "tomorrow", "2026-13-01T00:00:00Z", "2026-11-23t14z"])
def test_an_unreadable_snooze_tag_is_no_snooze(raw: str) -> None:
    assert snoozed_until(box(tags={"costguard:snooze-until": raw})) is None


def test_the_later_of_the_instance_and_group_snooze_holds() -> None:
    group = ASG.model_copy(update={"tags": {"costguard:snooze-until": "2026-11-26T00:00:00Z"}})
    early = box(owner=group, tags={"costguard:snooze-until": "2026-11-25T00:00:00Z"})
    assert snoozed_until(early) == datetime(2026, 11, 26, tzinfo=UTC)
    late = box(owner=group, tags={"costguard:snooze-until": "2026-11-27T00:00:00Z"})
    assert snoozed_until(late) == datetime(2026, 11, 27, tzinfo=UTC)
    assert snoozed_until(box(owner=group)) == datetime(2026, 11, 26, tzinfo=UTC)
    assert snoozed_until(box(owner=ASG)) is None


def test_a_snooze_is_cut_to_the_longest_an_admin_allows() -> None:
    started = NOW
    asked = NOW + timedelta(days=30)
    assert snooze_limit(asked, started, timedelta(days=7)) == NOW + timedelta(days=7)
    assert snooze_limit(NOW + timedelta(days=2), started, timedelta(days=7)) == (
        NOW + timedelta(days=2))
    assert snooze_limit(asked, started, None) == asked


# -- members of a controller ---------------------------------------------------------------------

def test_a_pet_has_no_refusal_and_a_member_is_told_what_to_do_instead() -> None:
    assert pet_refusal(box(), "stop") is None
    assert pet_refusal(box(owner=ASG), "terminate") == (
        "terminate refused: managed by asg trainers (tag aws:autoscaling:groupName); add a "
        "`scale_in` step to the policy to shrink the group by it, or lower the group's desired "
        "size")


def test_a_kubernetes_node_is_left_to_its_cluster() -> None:
    assert owner_advice(Owner(kind=OwnerKind.EKS, name="g")) == (
        "draining a node belongs to the cluster's autoscaler: cordon and drain it, or let the "
        "autoscaler shrink the node pool")


@pytest.mark.parametrize(("kind", "advice"), [
    (OwnerKind.GKE, "draining a node belongs to the cluster's autoscaler"),
    (OwnerKind.KARPENTER, "draining a node belongs to the cluster's autoscaler"),
    (OwnerKind.MIG, "add a `scale_in` step"),
    (OwnerKind.BATCH, "shrink or stop it through its batch, which would otherwise replace it"),
    (OwnerKind.TPU_SLICE, "the Cloud TPU API stops single-host TPU nodes only: delete the "
                          "slice when its work is saved, or recreate it smaller"),
    (OwnerKind.TPU_QUEUED_RESOURCE, "delete the queued resource (with its TPU nodes) when the "
                                    "work is saved: its nodes are the queued resource's"),
])
def test_the_advice_fits_the_controller(kind: OwnerKind, advice: str) -> None:
    assert owner_advice(Owner(kind=kind, name="g")).startswith(advice)


# -- caps: all or nothing --------------------------------------------------------------------------

def test_a_batch_at_the_policy_cap_acts_one_over_does_not() -> None:
    assert check_caps([1.0] * 3, max_actions=3, max_usd_per_hour=None).allowed
    over = check_caps([1.0] * 4, max_actions=3, max_usd_per_hour=None)
    assert over.allowed is False and over.reason == "4 instances due, cap is 3 per cycle"
    assert check_caps([10.0, 22.5], max_actions=None, max_usd_per_hour=32.5).allowed
    dear = check_caps([10.0, 22.5], max_actions=None, max_usd_per_hour=32.49)
    assert dear.allowed is False
    assert dear.reason == "$32.50/h affected, cap is $32.49/h per cycle"
    assert check_caps([1e6] * 100, max_actions=None, max_usd_per_hour=None).allowed


def test_the_fleet_budget_is_taken_whole_or_not_at_all() -> None:
    budget = CycleBudget(actions_left=3, usd_per_hour_left=50.0)
    assert budget.take([10.0, 10.0]).allowed
    assert (budget.actions_left, budget.usd_per_hour_left) == (1, 30.0)
    refused = budget.take([5.0, 5.0])
    assert refused.allowed is False
    assert refused.reason == ("2 instances due, 1 left of the fleet-wide per-cycle cap "
                              "(safety.max_actions_per_cycle)")
    assert (budget.actions_left, budget.usd_per_hour_left) == (1, 30.0)  # nothing taken
    dear = budget.take([30.01])
    assert dear.allowed is False and dear.reason == (
        "$30.01/h due, $30.00/h left of the fleet-wide per-cycle cap "
        "(safety.max_usd_per_hour_per_cycle)")
    assert budget.take([30.0]).allowed  # exactly what is left
    assert (budget.actions_left, budget.usd_per_hour_left) == (0, 0.0)


def test_a_billionth_of_a_dollar_of_float_rounding_is_not_a_breach() -> None:
    assert CycleBudget(actions_left=None, usd_per_hour_left=1.0).take([1.000000001]).allowed
    assert not CycleBudget(actions_left=None, usd_per_hour_left=1.0).take([1.00001]).allowed


def test_an_unlimited_budget_stays_unlimited() -> None:
    budget = CycleBudget(actions_left=None, usd_per_hour_left=None)
    assert budget.take([100.0] * 50).allowed
    assert (budget.actions_left, budget.usd_per_hour_left) == (None, None)
    dollars_only = CycleBudget(actions_left=None, usd_per_hour_left=5.0)
    assert dollars_only.take([1.0] * 5).allowed and dollars_only.actions_left is None


def test_a_batch_the_policy_refuses_takes_nothing_from_the_fleet_budget() -> None:
    budget = CycleBudget(actions_left=10, usd_per_hour_left=None)
    refused = batch_verdict([1.0] * 3, Limits(max_actions_per_cycle=2), budget)
    assert not refused.allowed and "cap is 2 per cycle" in refused.reason
    assert budget.actions_left == 10
    assert batch_verdict([1.0] * 2, Limits(max_actions_per_cycle=2), budget).allowed
    assert budget.actions_left == 8
    fleet_refused = batch_verdict([1.0] * 9, Limits(max_actions_per_cycle=20), budget)
    assert not fleet_refused.allowed and "fleet-wide" in fleet_refused.reason
    dear = batch_verdict([3.0, 3.0], Limits(max_usd_per_hour=5.0), budget)
    assert not dear.allowed and dear.reason == "$6.00/h affected, cap is $5.00/h per cycle"
    assert budget.actions_left == 8


# -- the last re-check before a call -------------------------------------------------------------

class Cloud:
    def __init__(self, answer: Instance | Exception | None) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def describe(self, inst: Instance) -> Instance | None:
        self.asked.append(inst.instance_id)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_provider_that_cannot_describe_is_trusted_to_check_inside_stop() -> None:
    inst = box()
    assert recheck(object(), inst, NOW) == (inst, None)


def test_a_provider_error_on_re_check_stops_the_action() -> None:
    inst = box()
    fresh, why = recheck(Cloud(ProviderError("aws", "us-east-1", "throttled")), inst, NOW)
    assert fresh is inst and why == "could not re-check the instance: aws us-east-1: throttled"


def test_an_instance_gone_since_inventory_is_not_acted_on() -> None:
    inst = box()
    assert recheck(Cloud(None), inst, NOW) == (inst, "the instance no longer exists")


def test_re_check_returns_the_instance_as_the_cloud_shows_it_now() -> None:
    fresh = box(tags={"team": "ml"})
    cloud = Cloud(fresh)
    assert recheck(cloud, box(), NOW) == (fresh, None)
    assert cloud.asked == ["i-1"]


def test_a_snooze_set_after_inventory_stops_the_stop() -> None:
    fresh = box(tags={"costguard:snooze-until": "2026-11-24T18:00:00Z"})
    _, why = recheck(Cloud(fresh), box(), NOW)
    assert why == ("costguard:snooze-until was set since the last inventory "
                   "(2026-11-24T18:00:00+00:00)")


def test_a_snooze_already_weighed_or_expired_does_not_stop_the_stop() -> None:
    weighed = box(tags={"costguard:snooze-until": "2026-11-30T00:00:00Z"})
    assert skip_reason(weighed, weighed, NOW) is None  # the state machine cut or honoured it
    expired = box(tags={"costguard:snooze-until": "2026-11-24T11:00:00Z"})
    assert skip_reason(box(), expired, NOW) is None
    at_now = box(tags={"costguard:snooze-until": "2026-11-24T12:00:00Z"})
    assert skip_reason(box(), at_now, NOW) is None
    unreadable = box(tags={"costguard:snooze-until": "soon"})
    assert skip_reason(box(), unreadable, NOW) is None


def test_a_protect_tag_set_after_inventory_stops_the_stop() -> None:
    assert skip_reason(box(), box(tags={"costguard:protect": "true"}), NOW) == (
        "costguard:protect was set since the last inventory")


@pytest.mark.parametrize(("state", "reason"), [
    (InstanceState.STOPPED, "the instance is now stopped, not running"),
    (InstanceState.STOPPING, "the instance is now stopping, not running"),
    (InstanceState.TERMINATED, "the instance is now terminated, not running"),
])
def test_an_instance_whose_state_changed_since_inventory_is_refused(
        state: InstanceState, reason: str) -> None:
    assert skip_reason(box(), box(state=state), NOW) == reason


def test_a_start_wants_the_instance_stopped() -> None:
    stopped = box(state=InstanceState.STOPPED)
    assert skip_reason(stopped, stopped, NOW, InstanceState.STOPPED) is None
    assert skip_reason(stopped, box(), NOW, InstanceState.STOPPED) == (
        "the instance is now running, not stopped")


def test_a_new_type_or_a_relaunch_is_a_different_machine() -> None:
    assert skip_reason(box(), box(instance_type="p5.48xlarge"), NOW) == (
        "changed meanwhile: type is now p5.48xlarge (was p4d.24xlarge)")
    relaunched = box(launch_time=NOW - timedelta(minutes=5))
    assert skip_reason(box(), relaunched, NOW) == (
        "changed meanwhile: relaunched at 2026-11-24T11:55:00+00:00 "
        "(was 2026-11-22T12:00:00+00:00)")
    earlier = box(launch_time=NOW - timedelta(days=2, seconds=2))
    assert skip_reason(box(), earlier, NOW) is not None


def test_a_launch_time_rounded_by_the_store_is_the_same_machine() -> None:
    rounded = box(launch_time=NOW - timedelta(days=2) + timedelta(milliseconds=900))
    assert skip_reason(box(), rounded, NOW) is None
    within = box(launch_time=NOW - timedelta(days=2, seconds=1))
    assert skip_reason(box(), within, NOW) is None
    naive = box(launch_time=(NOW - timedelta(days=2)).replace(tzinfo=None))
    assert skip_reason(box(), naive, NOW) is None


def test_a_pet_that_joined_a_group_since_inventory_is_refused() -> None:
    assert skip_reason(box(), box(owner=ASG), NOW) == (
        "it is managed by asg trainers now (tag aws:autoscaling:groupName)")


def test_a_scale_in_needs_the_instance_still_in_the_same_group() -> None:
    member = box(owner=ASG)
    assert skip_reason(member, member, NOW, pet=False) is None
    assert skip_reason(member, box(), NOW, pet=False) == (
        "it is no longer a member of asg trainers (now: no group)")
    other = box(owner=ASG.model_copy(update={"name": "other"}))
    assert skip_reason(member, other, NOW, pet=False) == (
        "it is no longer a member of asg trainers (now: asg other)")
    mig = box(owner=ASG.model_copy(update={"kind": OwnerKind.MIG}))
    assert skip_reason(member, mig, NOW, pet=False) is not None
    assert skip_reason(box(), member, NOW, pet=False) == (
        "it is no longer a member of no group (now: asg trainers)")
    resized = box(owner=ASG.model_copy(update={"desired": 3}))
    assert skip_reason(member, resized, NOW, pet=False) is None
