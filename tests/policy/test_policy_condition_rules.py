"""The rules `condition:` enforces when a policy is read: missing data is never idle, a cost
threshold is given exactly once, a condition says something (found by mutation testing:
see MUTATION.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from costguard.policy.conditions import Condition, CostOver, IdleCondition


def refusal(model: type[Condition | CostOver | IdleCondition], data: dict[str, object]
            ) -> tuple[str, str]:
    """The (type, message) of the one error reading `data` gives."""
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    (error,) = caught.value.errors()
    return error["type"], error["msg"]


def test_missing_data_can_only_mean_not_idle() -> None:
    assert IdleCondition.model_validate({"missing_data": "not-idle"}).missing_data == "not-idle"
    assert refusal(IdleCondition, {"missing_data": "idle"}) == (
        "missing_data",
        "missing_data must be 'not-idle' (got 'idle'): costguard never treats missing telemetry "
        "as idle, because a GPU that stopped reporting may still be working; lower "
        "min_coverage instead if data is sparse")


def test_the_idle_window_defaults_to_45_minutes() -> None:
    idle = IdleCondition()
    assert idle.window == timedelta(minutes=45) == idle.for_
    assert IdleCondition.model_validate({"for": "2h"}).window == timedelta(hours=2)


@pytest.mark.parametrize(("given", "hourly"), [
    ({"usd_per_hour": 12.5}, 12.5), ({"usd_per_day": 300}, 12.5), ({"usd_per_day": 1}, 1 / 24)])
def test_a_cost_threshold_reads_as_dollars_per_running_hour(
        given: dict[str, float], hourly: float) -> None:
    assert CostOver.model_validate(given).hourly_usd == hourly


@pytest.mark.parametrize("given", [{}, {"usd_per_hour": 1, "usd_per_day": 24}])
def test_a_cost_threshold_is_given_exactly_once(given: dict[str, float]) -> None:
    assert refusal(CostOver, given) == ("cost_over",
                                        "give exactly one of usd_per_hour or usd_per_day")


def test_a_condition_must_say_something() -> None:
    assert refusal(Condition, {}) == (
        "condition", "give at least one condition: idle, underused, running_longer_than, "
        "missing_tags, cost_over or outside_hours")
    assert refusal(Condition, {"missing_tags": []}) == (
        "condition", "missing_tags needs at least one tag key, e.g. [team]")


@pytest.mark.parametrize("given", [
    {"idle": {}}, {"running_longer_than": "1h"}, {"missing_tags": "team"},
    {"cost_over": {"usd_per_hour": 1}}, {"missing_tags": ["team"], "running_longer_than": "2h"}])
def test_any_one_condition_is_enough(given: dict[str, object]) -> None:
    Condition.model_validate(given)
