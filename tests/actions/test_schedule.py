"""Office hours and business days on the local wall clock, across DST changes and holidays."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from costguard.actions.schedule import (
    business_deadline,
    in_office_hours,
    next_opening,
    why_outside,
)
from costguard.errors import PolicyError
from costguard.policy.load import parse_policy_text
from costguard.policy.schedule import Calendar, OfficeHours

BERLIN = OfficeHours(timezone="Europe/Berlin", hours="08:00-19:00", days="mon-fri",
                     holidays="DE")


def utc(year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize(("when", "inside"), [
    (utc(2026, 3, 27, 7, 30), True),    # Fri before the spring change: 08:30 CET (UTC+1)
    (utc(2026, 3, 27, 6, 30), False),   # 07:30 CET
    (utc(2026, 3, 30, 6, 30), True),    # Mon after it: 08:30 CEST (UTC+2)
    (utc(2026, 3, 30, 5, 30), False),   # 07:30 CEST, though 06:30 UTC was inside on Friday
    (utc(2026, 3, 30, 16, 59), True),   # 18:59 CEST
    (utc(2026, 3, 30, 17, 0), False),   # 19:00 CEST: closed
    (utc(2026, 10, 26, 7, 0), True),    # Mon after the autumn change: 08:00 CET
    (utc(2026, 10, 26, 6, 59), False),  # 07:59 CET
    (utc(2026, 3, 28, 12, 0), False),   # Saturday
    (utc(2026, 12, 25, 10, 0), False),  # Christmas Day (a Friday) is a German holiday
    (utc(2026, 10, 3, 10, 0), False),   # German Unity Day (Saturday anyway)
    (utc(2026, 5, 1, 10, 0), False),    # Labour Day, a Friday
])
def test_office_hours_follow_the_local_wall_clock_across_dst(when: datetime,
                                                             inside: bool) -> None:
    assert in_office_hours(BERLIN, when) is inside


def test_reasons_for_being_outside_office_hours_name_the_day_or_holiday() -> None:
    assert "Saturday" in why_outside(BERLIN, utc(2026, 3, 28, 12, 0))
    assert "holiday" in why_outside(BERLIN, utc(2026, 12, 25, 10, 0))
    assert "21:00" in why_outside(BERLIN, utc(2026, 3, 30, 19, 0))


def test_next_opening_skips_weekends_and_holidays() -> None:
    # Thursday 2026-12-24 evening -> Friday 25 and Saturday/Sunday closed, Mon 28 08:00 CET
    assert next_opening(BERLIN, utc(2026, 12, 24, 20, 0)) == utc(2026, 12, 28, 7, 0)
    # inside hours it is now
    assert next_opening(BERLIN, utc(2026, 12, 28, 9, 0)) == utc(2026, 12, 28, 9, 0)


def test_business_deadline_counts_only_business_days() -> None:
    cal = Calendar(timezone="Europe/Berlin", holidays="DE")
    # Friday 2026-11-06 18:00 CET + 1 business day -> Monday 18:00 CET
    start = utc(2026, 11, 6, 17, 0)
    assert business_deadline(cal, start, timedelta(days=1)) == utc(2026, 11, 9, 17, 0)
    # begun on a Saturday: counting starts Monday 00:00 local
    assert business_deadline(cal, utc(2026, 11, 7, 12, 0), timedelta(hours=2)) == \
        utc(2026, 11, 8, 23, 0) + timedelta(hours=2)


def test_business_deadline_over_the_spring_change_counts_real_hours() -> None:
    cal = Calendar(timezone="Europe/Berlin", days="mon-sun")
    # Sunday 2026-03-29 has 23 hours in Berlin; 24 real hours from Saturday 23:00 UTC
    start = utc(2026, 3, 28, 23, 0)  # Sunday 00:00 CET
    assert business_deadline(cal, start, timedelta(hours=24)) == utc(2026, 3, 29, 23, 0)


@pytest.mark.parametrize(("snippet", "message"), [
    ("timezone: Europe/Berlim", "unknown timezone 'Europe/Berlim'"),
    ('hours: "19:00-08:00"', "end before they start"),
    ("hours: 8-19", "HH:MM-HH:MM"),
    ("days: monday-friday", "three-letter weekdays"),
    ("holidays: XX", "unknown holiday calendar 'XX'"),
])
def test_bad_office_hours_are_reported_with_a_fix(snippet: str, message: str) -> None:
    text = f"""\
policies:
  - name: office
    condition:
      outside_hours:
        {snippet}
    actions: [notify]
"""
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(text)
    assert message in str(caught.value)


def test_start_step_needs_office_hours_and_a_stop() -> None:
    with pytest.raises(PolicyError, match=r"needs condition\.outside_hours"):
        parse_policy_text("""\
policies:
  - name: p
    condition: {idle: {for: 45m}}
    actions: [stop, start]
""")
    with pytest.raises(PolicyError, match="add a `stop` step"):
        parse_policy_text("""\
policies:
  - name: p
    condition: {idle: {for: 45m}}
    actions: [notify, terminate]
""")
