"""The report API's query parameters: the grammar each one takes, written once here for the
server that reads them and for the OpenAPI document that states them (openapi.py), so what
the document calls valid is what the API takes, and what it calls invalid gets a 400.

The CLI reads the same options more freely (`--since 20261101`, `--since 'yesterday 9:00'`
where Python reads them): the API takes the forms it documents and no others.

What a schema cannot say: `since` must come before `until`, a window is at most
`views.MAX_WINDOW`, and a date is one the calendar has; those are 400s too, saying so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from costguard.errors import CostguardError
from costguard.report.queries import DIMENSIONS

MAX_LIMIT = 1000
MAX_OFFSET = 10**9


class BadParameter(CostguardError, ValueError):
    """A query parameter the API cannot use (400)."""


_DIGITS = "[0-9]"  # ASCII only: Python's \d and int() take any script's digits
DURATION = "".join(f"(?:{_DIGITS}+{unit})?" for unit in "wdhms")  # 90s, 2h, 1h30m, 7d
# the years costguard reads (report/run.py EARLIEST, LATEST)
_DATE = "(?:19[7-9][0-9]|[2-8][0-9]{3})-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
_CLOCK = "(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\\.[0-9]{1,6})?)?"
_ZONE = "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
# empty (the default), a duration back from now, an RFC 3339 date or date-time
WHEN_PATTERN = f"^(?:{DURATION}|{_DATE}|{_DATE}T{_CLOCK}{_ZONE}?)$"
# the dimensions as the API takes them: `-` or `_` between words (cost_center, cost-center)
BY_NAMES = sorted({spelled for d in DIMENSIONS for spelled in (d, d.replace("-", "_"))})
_DIMENSION = "|".join(d.replace("-", "[-_]") for d in DIMENSIONS)
# a value is any text but NUL, which the daemon refuses in any URL (daemon/http.py)
FILTER_PATTERN = f"^\\s*(?:{_DIMENSION})\\s*=[^\\u0000]+$"
ID_PATTERN = "^[^\\u0000]+$"

_WHEN = re.compile(WHEN_PATTERN)
_FILTER = re.compile(FILTER_PATTERN)
_WHOLE = re.compile(f"{_DIGITS}+")


def when_params(params: Mapping[str, str]) -> Mapping[str, str]:
    """`window`, `since` and `until` as given, each checked against WHEN_PATTERN."""
    for name in ("window", "since", "until"):
        text = params.get(name)
        if text is not None and not _WHEN.fullmatch(text):
            raise BadParameter(
                f"{name} {text!r} is neither a duration (30d, 24h, 1h30m) nor an RFC 3339 "
                "date or date-time of the years 1970 to 8999 (2026-11-01, "
                "2026-11-01T09:00:00Z)")
    return params


def dimensions(text: str | None) -> list[str]:
    """`team,instance_type`: report dimensions, `_` read as `-`; one named twice counts
    once. Empty: none."""
    if not text:
        return []
    out: list[str] = []
    for part in text.split(","):
        name = part.strip()
        dim = name.replace("_", "-")
        if not name:
            raise BadParameter(f"by {text!r} has an empty name between its commas")
        if dim not in DIMENSIONS:
            raise BadParameter(f"unknown by dimension {name!r} (choose from: "
                               f"{', '.join(DIMENSIONS)})")
        if dim not in out:
            out.append(dim)
    return out


def filters(given: Sequence[str]) -> list[str]:
    """Each `filter`: `DIMENSION=VALUE`, the dimension as `by` takes it."""
    out = []
    for f in given:
        if not _FILTER.fullmatch(f):
            raise BadParameter(f"filter {f!r}: use DIMENSION=VALUE, e.g. team=research "
                               f"(dimensions: {', '.join(DIMENSIONS)})")
        key, sep, value = f.partition("=")
        out.append(f"{key.strip().replace('_', '-')}{sep}{value}")
    return out


def whole(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not _WHOLE.fullmatch(text):
        raise BadParameter(f"{name} must be a whole number from {low} to {high}, not {text!r}")
    # past `high`'s digits it is out of range (and past 4,300 int() refuses to read it)
    value = int(text) if len(text.lstrip("0")) <= len(str(high)) else high + 1
    if not low <= value <= high:
        raise BadParameter(f"{name} must be between {low} and {high}")
    return value


def flag(params: Mapping[str, str], name: str) -> bool:
    """`true` or `false` (JSON's words, as the document's boolean); absent: false."""
    text = params.get(name, "false")
    if text not in ("true", "false"):
        raise BadParameter(f"{name} must be true or false, not {text!r}")
    return text == "true"
