"""Office hours and business-day arithmetic over a policy's `Calendar`, in local time.

Days and hours are read on the calendar's wall clock (zoneinfo); durations are added and
subtracted in UTC. Python subtracts two datetimes sharing one tzinfo as wall-clock times,
which would make the 23-hour spring day 24 hours long, hence the conversions.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from costguard.clock import utc
from costguard.policy.schedule import Calendar, OfficeHours, holiday_calendar


def is_business_day(cal: Calendar, day: date) -> bool:
    """True when `day` (a local date) is one of the calendar's weekdays and no holiday."""
    if day.weekday() not in cal.weekday_numbers:
        return False
    return cal.holidays is None or day not in holiday_calendar(cal.holidays)


def holiday_name(cal: Calendar, day: date) -> str | None:
    if cal.holidays is None:
        return None
    name = holiday_calendar(cal.holidays).get(day)
    return str(name) if name else None


def in_office_hours(hours: OfficeHours, when: datetime) -> bool:
    """True when `when` (any timezone) falls inside the local office hours."""
    local = when.astimezone(hours.zone)
    if not is_business_day(hours, local.date()):
        return False
    return hours.opens <= local.time() < hours.closes


def why_outside(hours: OfficeHours, when: datetime) -> str:
    """A reason a person understands: 'Saturday', 'holiday (Christmas Day)', '21:10 local'."""
    local = when.astimezone(hours.zone)
    if local.weekday() not in hours.weekday_numbers:
        return f"{local:%A} in {hours.timezone}"
    name = holiday_name(hours, local.date())
    if name:
        return f"public holiday ({name}) in {hours.timezone}"
    return f"{local:%H:%M} in {hours.timezone}, outside {hours.hours}"


def next_opening(hours: OfficeHours, after: datetime, *, horizon_days: int = 40) -> datetime:
    """The first moment at or after `after` that lies inside office hours (UTC)."""
    zone = hours.zone
    local = after.astimezone(zone)
    for offset in range(horizon_days):
        day = local.date() + timedelta(days=offset)
        if not is_business_day(hours, day):
            continue
        opens = utc(_local(day, hours.opens, zone))
        closes = utc(_local(day, hours.closes, zone))
        if after < opens:
            return opens
        if after < closes:
            return utc(after)
    raise ValueError(f"no office hours within {horizon_days} days of {after.isoformat()}")


def business_deadline(cal: Calendar, start: datetime, grace: timedelta) -> datetime:
    """`start + grace`, counting only time that falls on the calendar's business days.

    A 3-day grace given on Friday evening in Berlin ends on Wednesday evening; one given on
    a Saturday counts from Monday 00:00 local.
    """
    zone = cal.zone
    remaining = grace
    t = utc(start)
    for _ in range(3660):  # ten years of days: a calendar with no business days fails loud
        day = t.astimezone(zone).date()
        midnight = utc(_local(day + timedelta(days=1), time(0), zone))
        if is_business_day(cal, day):
            step = midnight - t
            if remaining <= step:
                return t + remaining
            remaining -= step
        t = midnight
    raise ValueError("the calendar has no business days; give `days` at least one weekday")


def _local(day: date, at: time, zone: ZoneInfo) -> datetime:
    # fold=0: on the autumn change an ambiguous wall time means its first occurrence
    return datetime.combine(day, at, tzinfo=zone)
