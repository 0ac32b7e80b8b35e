"""Calendars and office hours: `condition.outside_hours` and `stop.calendar`.

Times are local to the calendar's IANA timezone, so "08:00-19:00 Europe/Berlin" stays
08:00-19:00 on the wall clock across daylight-saving changes. Holidays come from the
`holidays` package (country code, optionally with a subdivision: `DE`, `DE-BY`, `US-CA`).
"""

from __future__ import annotations

import re
from datetime import time
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_core import PydanticCustomError

from costguard.policy.base import Element, TypeLabel

if TYPE_CHECKING:
    import holidays

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HOURS = re.compile(r"(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})")


def _check_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        close = sorted(z for z in available_timezones() if value.lower() in z.lower())[:3]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise PydanticCustomError(
            "timezone",
            f"unknown timezone {value!r}{hint}: use an IANA name such as Europe/Berlin, "
            "America/New_York or UTC",
        ) from None
    return value


Timezone = Annotated[str, AfterValidator(_check_timezone), TypeLabel("timezone")]


def _parse_days(value: Any) -> Any:
    """`mon-fri`, `mon,wed,fri`, `[mon, tue]` -> weekday names in week order."""
    items: list[str]
    if isinstance(value, str):
        items = [p.strip() for p in value.split(",")]
    elif isinstance(value, list | tuple):
        items = [str(p).strip() for p in value]
    else:
        return value
    days: set[int] = set()
    for item in items:
        first, _, last = item.lower().partition("-")
        if first not in WEEKDAYS or (last and last not in WEEKDAYS):
            raise PydanticCustomError(
                "days",
                f"invalid days {item!r}: use three-letter weekdays (mon ... sun), ranges "
                "like mon-fri, or lists like [mon, wed, fri]",
            )
        a = WEEKDAYS.index(first)
        b = WEEKDAYS.index(last) if last else a
        span = range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)]
        days.update(span)
    if not days:
        raise PydanticCustomError("days", "give at least one weekday, e.g. mon-fri")
    return tuple(WEEKDAYS[d] for d in sorted(days))


Weekdays = Annotated[tuple[str, ...], BeforeValidator(_parse_days), TypeLabel("weekdays")]


@lru_cache(maxsize=64)
def holiday_calendar(code: str) -> holidays.HolidayBase:
    """The `holidays` calendar for `DE` or `DE-BY` (country, optional subdivision); the
    package is imported by the first policy that names a calendar, not by every cycle."""
    import holidays

    country, _, subdiv = code.partition("-")
    return holidays.country_holidays(country.upper(), subdiv=subdiv.upper() or None)


def _check_holidays(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        holiday_calendar(value)
    except NotImplementedError as exc:
        raise PydanticCustomError(
            "holidays",
            f"unknown holiday calendar {value!r} ({exc}): use an ISO country code such as "
            "DE, US or FR, optionally with a subdivision such as DE-BY or US-CA",
        ) from None
    return value


HolidayCode = Annotated[str | None, AfterValidator(_check_holidays)]


def _parse_hours(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    m = _HOURS.fullmatch(value.strip())
    bad = PydanticCustomError(
        "hours", f"invalid hours {value!r}: write HH:MM-HH:MM in 24-hour time, e.g. 08:00-19:00"
    )
    if m is None:
        raise bad
    h1, m1, h2, m2 = (int(g) for g in m.groups())
    if h1 > 23 or h2 > 24 or m1 > 59 or m2 > 59 or (h2 == 24 and m2):
        raise bad
    start, end = time(h1, m1), (time(23, 59, 59, 999999) if h2 == 24 else time(h2, m2))
    if end <= start:
        raise PydanticCustomError(
            "hours",
            f"hours {value!r} end before they start; office hours that cross midnight are "
            "not supported (use two policies)",
        )
    return f"{h1:02d}:{m1:02d}-{h2:02d}:{m2:02d}"


Hours = Annotated[str, BeforeValidator(_parse_hours), TypeLabel("HH:MM-HH:MM")]


class Calendar(Element):
    """Which local days are business days: `days` (default mon-fri) in `timezone`,
    minus the public holidays of `holidays` (an ISO country code, optionally with a
    subdivision: `DE`, `DE-BY`, `US-CA`; leave it out for none). Used by `stop.calendar`
    so a grace period counts business days only."""

    yaml_key: ClassVar[str] = "actions[].stop.calendar"
    example: ClassVar[str] = """\
policies:
  - name: untagged-gpus-stop-after-3-business-days
    mode: enforce
    filters: {gpu: true, state: running}
    condition:
      missing_tags: [team]
    actions:
      - notify: {to: owner}
      - tag: {set: {"costguard:stop-after": "{deadline}"}}
      - stop:
          grace: 3d
          calendar: {timezone: Europe/Berlin, days: mon-fri, holidays: DE}
"""

    timezone: Timezone = Field(default="UTC", description="IANA timezone of the calendar.")
    days: Weekdays = Field(default=WEEKDAYS[:5], description="Business weekdays.")
    holidays: HolidayCode = Field(default=None, description="Holiday calendar, e.g. DE-BY.")

    @property
    def zone(self) -> ZoneInfo:
        """The calendar's timezone."""
        return ZoneInfo(self.timezone)

    @property
    def weekday_numbers(self) -> frozenset[int]:
        """The business days as `datetime.weekday()` numbers (monday is 0)."""
        return frozenset(WEEKDAYS.index(d) for d in self.days)


class OfficeHours(Calendar):
    """Holds while the local time is OUTSIDE office hours: before or after `hours`, on a
    day not in `days`, or on a public holiday of `holidays`. Use it to stop development
    GPU boxes at night and over weekends; pair it with `start: {at_office_hours: true}`
    to start them again when office hours begin. Wall-clock hours in `timezone` hold
    across daylight-saving changes."""

    yaml_key: ClassVar[str] = "condition.outside_hours"
    example: ClassVar[str] = """\
policies:
  - name: dev-gpus-office-hours
    mode: enforce
    filters: {gpu: true, state: running, tags: {values: {env: [dev]}}}
    condition:
      outside_hours:
        timezone: Europe/Berlin
        hours: "08:00-19:00"
        days: mon-fri
        holidays: DE
    actions:
      - notify: {to: owner}
      - stop: {grace: 30m}
      - start: {at_office_hours: true}
"""

    hours: Hours = Field(default="08:00-19:00", description="Local office hours, HH:MM-HH:MM.")

    @property
    def opens(self) -> time:
        """Local opening time."""
        return time.fromisoformat(self.hours.split("-")[0])

    @property
    def closes(self) -> time:
        """Local closing time (24:00 reads as the end of the day)."""
        end = self.hours.split("-")[1]
        return time(23, 59, 59, 999999) if end == "24:00" else time.fromisoformat(end)
