"""Human durations ("90s", "45m", "2h", "7d", "1h30m") as a pydantic-validated timedelta."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?[smhdw])+$")


def parse_duration(value: Any) -> timedelta:
    """Parse '45m' style text (or pass a timedelta through); raise ValueError with a fix."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"invalid duration {value!r} (use a number and a unit: 90s, 45m, 2h, 7d)")
    if isinstance(value, int | float):
        raise ValueError(
            f"invalid duration {value!r}: a bare number has no unit "
            f"(write e.g. '{value}m' for minutes or '{value}h' for hours)"
        )
    text = value.strip().lower().replace(" ", "")
    if not _WHOLE.match(text):
        raise ValueError(f"invalid duration {value!r} (use a number and a unit: 90s, 45m, 2h, 7d)")
    seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """The shortest exact text for `delta`: 2700 s -> '45m', 5400 s -> '1h30m'."""
    total = int(delta.total_seconds())
    if total == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, total = divmod(total, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
]
