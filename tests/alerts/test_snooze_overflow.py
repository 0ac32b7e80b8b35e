"""A snooze longer than any date can hold is capped (by the policy) or refused, never a crash."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from costguard.alerts.content import snooze_until
from costguard.policy.base import duration_arg

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def test_a_huge_snooze_is_capped_by_max_snooze() -> None:
    assert snooze_until("9999999d", NOW, timedelta(days=7)) == NOW + timedelta(days=7)


def test_a_duration_beyond_timedelta_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="longer than any date"):
        duration_arg("99999999999999d")
