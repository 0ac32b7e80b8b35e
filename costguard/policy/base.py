"""Building blocks shared by every policy element: the base model and small value types."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

T = TypeVar("T")


class Element(BaseModel):
    """Base of every policy-file element: immutable, unknown keys are errors.

    Subclasses carry a docstring (rendered into docs/policies.md) and `example`: a complete
    policy file showing the element, which the test suite loads through the real loader.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    example: ClassVar[str] = ""
    yaml_key: ClassVar[str] = ""  # how the element is reached in a file, for the docs


@dataclass(frozen=True)
class TypeLabel:
    """Marks an annotated type with the name the documentation uses for it."""

    label: str


@dataclass(frozen=True)
class OneOrList:
    """Marks a list field that also accepts a single value."""


# ---------------------------------------------------------------- durations

_DURATION = re.compile(
    r"(?:(?P<w>\d+)w)?(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?"
)
_UNIT_SECONDS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
DURATION_HINT = "use a number and a unit: 90s, 45m, 2h, 7d"
LONGEST_DURATION = timedelta(days=36_500)


def parse_duration(value: Any) -> timedelta:
    """`"1h30m"` -> `timedelta(hours=1, minutes=30)`; units w, d, h, m, s, largest first."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PydanticCustomError("duration", f"invalid duration {value!r} ({DURATION_HINT})")
    if isinstance(value, int | float):
        raise PydanticCustomError(
            "duration",
            f"invalid duration {value}: a bare number has no unit (write {value}m or {value}s)",
        )
    text = value.strip().replace(" ", "")
    match = _DURATION.fullmatch(text)
    if not text or match is None:
        raise PydanticCustomError("duration", f"invalid duration {value!r} ({DURATION_HINT})")
    numbers = {u: n.lstrip("0") or "0" for u, n in match.groupdict().items() if n}
    # a number of more than 11 digits is over 100 years in any unit (and one of thousands
    # is past what int() reads: Python's own error, not the reason)
    seconds = (LONGEST_DURATION.days * 86_400 + 1 if any(len(n) > 11 for n in numbers.values())
               else sum(int(n) * _UNIT_SECONDS[u] for u, n in numbers.items()))
    if seconds > LONGEST_DURATION.days * 86_400:
        # now +- any duration stays a date, whatever adds it to or takes it from a time
        shown = value if len(value) <= 40 else f"{value[:20]}...({len(value)} characters)"
        raise PydanticCustomError(
            "duration", f"invalid duration {shown!r}: longer than 100 years (36500d), the "
            "longest costguard takes")
    return timedelta(seconds=seconds)


def duration_arg(text: str) -> timedelta:
    """`parse_duration` for command-line arguments: a plain ValueError with the hint."""
    try:
        return parse_duration(text)
    except PydanticCustomError as exc:
        raise ValueError(exc.message()) from None


def format_duration(value: timedelta) -> str:
    """The inverse of `parse_duration`: `timedelta(minutes=90)` -> `"1h30m"`."""
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in _UNIT_SECONDS.items():
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


Duration = Annotated[
    timedelta,
    PlainValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": _DURATION.pattern}),
    TypeLabel("duration"),
]


def at_least(minimum: timedelta, why: str) -> Callable[[timedelta], timedelta]:
    """A validator refusing durations shorter than `minimum`; `why` says the reason."""

    def check(value: timedelta) -> timedelta:
        if value < minimum:
            raise PydanticCustomError(
                "duration_too_short",
                f"must be at least {format_duration(minimum)} "
                f"(got {format_duration(value)}): {why}",
            )
        return value

    return check


# ---------------------------------------------------------------- lists and names


def _one_to_list(value: Any) -> Any:
    if isinstance(value, list | tuple | dict) or value is None:
        return value
    return [value]


OneOrMany = Annotated[tuple[T, ...], BeforeValidator(_one_to_list), OneOrList()]
"""A list that may be written as a single value: `state: running` or `state: [a, b]`."""

_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


def _check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise PydanticCustomError(
            "name",
            f"invalid name {value!r} (use lowercase letters, digits and dashes, "
            "starting with a letter or digit, e.g. idle-gpu-shutdown)",
        )
    return value


Name = Annotated[str, AfterValidator(_check_name), TypeLabel("name")]
"""Lowercase letters, digits and dashes: `idle-gpu-shutdown`."""


def _check_nonempty(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("empty", "must not be empty")
    return value


Text = Annotated[str, AfterValidator(_check_nonempty)]
