"""The typed policy model: defaults, shorthands, durations and accessors."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from costguard.errors import PolicyError
from costguard.model import PROVIDERS, ActionKind, InstanceState
from costguard.policy.base import format_duration, parse_duration
from costguard.policy.load import parse_policy_text
from costguard.policy.schema import (
    Budget,
    CostOver,
    IdleCondition,
    Policy,
    PolicySet,
    StopAction,
)

MINIMAL = """\
policies:
  - name: minimal
    condition: {missing_tags: team}
    actions: [notify]
"""


def _one_policy(text: str) -> Policy:
    (policy,) = parse_policy_text(text, "t.yml").policies
    return policy


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("45m", timedelta(minutes=45)),
        ("2h", timedelta(hours=2)),
        ("30d", timedelta(days=30)),
        ("1w", timedelta(weeks=1)),
        ("1h30m", timedelta(minutes=90)),
        ("1d 12h", timedelta(hours=36)),
        ("0s", timedelta(0)),
    ],
)
def test_durations_accept_units_and_combinations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["fortyfive", "45", "m45", "1.5h", "30m1h", "", "-5m", "2x"])
def test_bad_durations_are_refused_with_the_fix(text: str) -> None:
    with pytest.raises(ValidationError) as caught:
        StopAction.model_validate({"grace": text})
    assert "invalid duration" in str(caught.value)
    assert "90s, 45m, 2h, 7d" in str(caught.value)


@pytest.mark.parametrize("text", ["9" * 5000 + "d", "000000000000000000001d", "36501d"])
def test_a_duration_past_100_years_says_so_however_many_digits(text: str) -> None:
    if text.startswith("0"):  # leading zeros are not size
        assert parse_duration(text) == timedelta(days=1)
        return
    with pytest.raises(ValidationError) as caught:
        StopAction.model_validate({"grace": text})
    message = str(caught.value)
    assert "longer than 100 years" in message  # not Python's own digit limit
    assert len(message) < 600  # the value is shown cut, not 5,000 digits


@given(st.integers(min_value=0, max_value=10**8))
def test_format_duration_round_trips(seconds: int) -> None:
    value = timedelta(seconds=seconds)
    assert parse_duration(format_duration(value)) == value


def test_minimal_policy_is_a_dry_run_on_every_provider_with_safe_defaults() -> None:
    policy = _one_policy(MINIMAL)
    assert policy.mode == "dry-run" and not policy.is_enforced
    assert policy.providers == PROVIDERS
    assert policy.resource == "instance"
    assert policy.filters.gpu is None and policy.filters.state is None
    assert policy.limits.max_actions_per_cycle == 10 and policy.limits.max_usd_per_hour is None
    assert policy.condition.missing_tags == ("team",)
    assert policy.notify_action is not None and policy.notify_action.to == ("owner",)
    assert policy.stop_action is None and policy.tag_action is None


def test_idle_condition_defaults_never_count_missing_data_as_idle() -> None:
    idle = IdleCondition()
    assert idle.signal == "auto" and idle.below == 5 and idle.window == timedelta(minutes=45)
    assert idle.min_coverage == 0.8 and idle.missing_data == "not-idle"


def test_single_values_are_accepted_where_lists_are_expected() -> None:
    policy = _one_policy(
        "policies:\n  - name: p\n    providers: aws\n    filters: {state: running, "
        "regions: us-east-1, tags: {values: {env: dev}}}\n"
        "    condition: {missing_tags: team}\n    actions: [{notify: {to: team}}]\n"
    )
    assert policy.providers == ("aws",)
    assert policy.filters.state == (InstanceState.RUNNING,)
    assert policy.filters.regions == ("us-east-1",)
    assert policy.filters.tags is not None and policy.filters.tags.values == {"env": ("dev",)}


def test_accessors_return_the_first_action_of_each_kind_in_order() -> None:
    policy = _one_policy(
        "policies:\n  - name: p\n    mode: enforce\n    condition: {idle: {for: 1h}}\n"
        "    actions:\n      - notify: {to: owner}\n      - notify: {to: 'slack:#ops'}\n"
        "      - tag: {remove: [x]}\n      - stop: {grace: 1h}\n"
    )
    assert policy.is_enforced
    assert [a.kind for a in policy.actions] == [
        ActionKind.NOTIFY,
        ActionKind.NOTIFY,
        ActionKind.TAG,
        ActionKind.STOP,
    ]
    assert policy.notify_action is not None and policy.notify_action.to == ("owner",)
    assert policy.tag_action is not None and policy.tag_action.remove == ("x",)
    assert policy.stop_action is not None and policy.stop_action.grace == timedelta(hours=1)
    assert policy.actions[1].spec == policy.actions[1].notify


def test_two_stop_actions_are_refused() -> None:
    with pytest.raises(PolicyError, match="stop appears 2 times"):
        parse_policy_text(
            "policies:\n  - name: p\n    condition: {idle: {}}\n    actions: [stop, stop]\n"
        )


def test_cost_over_takes_exactly_one_threshold_and_converts_days_to_hours() -> None:
    assert CostOver(usd_per_day=240).hourly_usd == 10
    with pytest.raises(ValidationError, match="exactly one of usd_per_hour or usd_per_day"):
        CostOver(usd_per_hour=1, usd_per_day=24)


def test_budget_thresholds_are_sorted_and_deduplicated() -> None:
    budget = Budget.model_validate(
        {
            "name": "b",
            "dimension": "team",
            "value": "x",
            "monthly_usd": 10,
            "alert_at_percent": [100, 50, 100],
        }
    )
    assert budget.alert_at_percent == (50, 100)


@pytest.mark.parametrize(
    ("snippet", "fragment"),
    [
        ("filters: {tags: {present: [a], absent: [a]}}", "required and forbidden at once"),
        ("filters: {age: {older_than: 2d, younger_than: 1d}}", "older_than must be shorter"),
        ("filters: {age: {}}", "give older_than, younger_than or both"),
        ("actions: [{notify: {to: 'email:nobody'}}]", "invalid recipient 'email:nobody'"),
        ("actions: [{notify: {message: 'cost {usd}'}}]", "unknown placeholder {usd}"),
        ("actions: [{notify: {message: '{policy.__class__}'}}]", "{policy.__class__}"),
        ("actions: [{notify: {message: '{policy:{x}}'}}]", "unknown placeholder {x}"),
        ("actions: [{notify: {message: 'a } b'}}]", "Single '}' encountered"),
        ("actions: [{tag: {}}]", "give tags to `set` or to `remove`"),
        ("actions: [{tag: {set: {a: b}, remove: a}}]", "tag 'a' is both set and removed"),
        ("actions: [{}]",
         "exactly one of notify, tag, stop, start, terminate, scale_in, scale_to_zero or delete "
         "(got none)"),
        ("resource: bucket", "unknown kind of resource 'bucket': costguard governs `instance`, "
                              "`notebook`, `workload`"),
        ("providers: [azure]", "Input should be 'aws', 'gcp', 'sim' or 'k8s'"),
        ("limits: {max_actions_per_cycle: 0}", "greater than or equal to 1 (got 0)"),
    ],
)
def test_invalid_elements_say_what_is_wrong(snippet: str, fragment: str) -> None:
    key = snippet.split(":", 1)[0]
    base = {"filters": "filters: {}", "actions": "actions: [notify]"}
    lines = ["policies:", "  - name: p", "    condition: {missing_tags: team}"]
    lines.append("    " + snippet)
    if key != "actions":
        lines.append("    " + base["actions"])
    with pytest.raises(PolicyError) as caught:
        parse_policy_text("\n".join(lines) + "\n")
    assert any(fragment in e.message for e in caught.value.errors), caught.value


def test_attribution_refuses_builtin_and_undefined_dimensions() -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(
            "attribution:\n  dimensions: {region: {keys: r}}\n"
            "  derive: [{dimension: team, from: account, map: {'1': x}}]\n"
        )
    assert "dimension 'region' is built in" in str(caught.value)
    with pytest.raises(PolicyError, match="derive\\[0\\] uses dimension 'team'"):
        parse_policy_text(
            "attribution:\n  dimensions: {owner: {keys: owner}}\n"
            "  derive: [{dimension: team, from: account, map: {'1': x}}]\n"
        )


def test_policy_set_built_directly_still_refuses_duplicates_and_unknown_dimensions() -> None:
    policy = _one_policy(MINIMAL)
    with pytest.raises(ValidationError, match="policy name 'minimal' is defined more than once"):
        PolicySet(policies=(policy, policy))
    budget = Budget(name="b", dimension="team", value="x", monthly_usd=1)
    with pytest.raises(ValidationError, match="unknown dimension 'team'"):
        PolicySet(budgets=(budget,))
    assert PolicySet(policies=(policy,)).policy("minimal") is policy
    with pytest.raises(KeyError, match="no policy named 'other'"):
        PolicySet().policy("other")


def test_models_are_frozen() -> None:
    policy = _one_policy(MINIMAL)
    with pytest.raises(ValidationError):
        policy.mode = "enforce"  # type: ignore[misc]
