"""A very long snooze is capped (by the policy); one past the longest duration costguard takes
(100 years) is refused; neither is a crash."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from costguard.alerts.content import snooze_until
from costguard.policy.base import duration_arg

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def test_a_huge_snooze_is_capped_by_max_snooze() -> None:
    assert snooze_until("36500d", NOW, timedelta(days=7)) == NOW + timedelta(days=7)


@pytest.mark.parametrize("text", ["36501d", "5215w", "9999999d", "99999999999999d"])
def test_a_duration_past_100_years_is_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"longer than 100 years \(36500d\)"):
        duration_arg(text)
    with pytest.raises(ValueError, match="longer than 100 years"):
        snooze_until(text, NOW, timedelta(days=7))


def test_100_years_is_still_a_duration() -> None:
    assert duration_arg("36500d") == timedelta(days=36_500)
    assert duration_arg("5214w") == timedelta(weeks=5214)
