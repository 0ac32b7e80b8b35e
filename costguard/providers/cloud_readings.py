"""A cloud's GPU metrics as readings, each validated on its own: `validated`.

A cloud's GPU metrics are written by the hosts: the CloudWatch agent's PutMetricData, the Ops
Agent's time series. Anyone who may write a metric in the account or project can write any
value, dimension or label there: a GPU index past 2**31, a memory figure past 2**63 bytes,
a value that is not a number. Validated as one list, one such point failed the whole call,
and with it every cycle of the daemon (no actions, no alerts, nothing accrued, in every
account), for as long as the point stayed in the metrics' lookback.

Each reading is validated on its own. One that fails is dropped: that GPU-minute has no
data, which is never idle. The readings come as rows (`costguard.minute_rows`) and are
checked a column at a time, each value against its `GpuMinute` field's type and bounds
(pydantic's own checks of that field, a column in one call): a reading is dropped for its
first invalid field, in the model's order, as validating a model per reading dropped it. The
drop is logged once per call, with how many, and the first few instances, GPU, minute and
field, so a forged or broken series can be found; a call counts its drops (`Dropped`,
`providers.base.Readings.dropped`), and the cycle reports them (`readings_dropped` in its
summary, `costguard_cloud_readings_dropped_total` on /metrics): an agent that writes a field
no reading can hold (every memory figure, say) leaves its GPUs without data, which nothing
but that count shows.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, MutableSequence, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from costguard.minute_rows import GPU, INSTANCE, MINUTE, MinuteRows, column_check, value_check

log = logging.getLogger(__name__)

NAMED = 3  # rejected readings named in the log line; the rest are counted


class Dropped:
    """The readings one metrics call dropped, counted across its threads."""

    __slots__ = ("_lock", "count")

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.count += n


def validated(names: tuple[str, ...], rows: Sequence[tuple[Any, ...]], scope: str,
              dropped: Dropped | None = None) -> MinuteRows:
    """`rows` (readings' values in the order of `names`, read from `scope`'s metrics) as
    readings, less those that are not valid readings, which are logged (and counted in
    `dropped`). Checked a column at a time, each against its `GpuMinute` field's own type and
    bounds (what validating a model per reading checked, its first invalid field named)."""
    if not rows:
        return MinuteRows(names, [])
    columns: list[list[Any]] = []
    rejected: dict[int, str] = {}  # row -> why: its first invalid field, in the model's order
    for name, column in zip(names, zip(*rows, strict=True), strict=True):
        checked, errors = _checked(name, column)
        for index, error in errors:
            if index not in rejected:
                rejected[index] = _why(rows[index], name, error)
        columns.append(checked)
    if not rejected:
        return MinuteRows(names, list(zip(*columns, strict=True)))
    kept = [row for n, row in enumerate(zip(*columns, strict=True)) if n not in rejected]
    if dropped is not None:
        dropped.add(len(rejected))
    why = [rejected[n] for n in sorted(rejected)]
    more = len(why) - NAMED
    log.warning("%s: %d GPU reading%s dropped, not valid readings (no data, never idle): "
                "%s%s", scope, len(why), "" if len(why) == 1 else "s",
                "; ".join(why[:NAMED]), f"; and {more} more" if more > 0 else "")
    return MinuteRows(names, kept)


def _checked(name: str, column: Sequence[Any]) -> tuple[list[Any], list[tuple[int, Any]]]:
    """`column`, the values of field `name`, as that field holds them; and the (index,
    pydantic error) of each that is not valid (its place in the column left as it came)."""
    try:
        return column_check(name).validate_python(column), []
    except ValidationError:
        pass
    one = value_check(name)
    out: list[Any] = []
    errors: list[tuple[int, Any]] = []
    for index, value in enumerate(column):
        try:
            out.append(one.validate_python(value))
        except ValidationError as exc:
            out.append(value)
            errors.append((index, exc.errors()[0]))
    return out, errors


def busiest(row: MutableSequence[Any], figures: Iterable[tuple[int, Any]]) -> None:
    """Merge another series' `figures` (place in the row, value) of the same GPU and minute
    into `row`: the larger of each figure (a NaN, from either, stays NaN, for `validated` to
    refuse). Series that claim the same GPU are all read, and points or series anyone adds
    can then only make it look busier, never idle."""
    for at, value in figures:
        held = row[at]
        if (held is None or value != value
                or (value is not None and held == held and value > held)):
            row[at] = value


def whole_bytes(value: float) -> int | float:
    """A byte count read from a metric as whole bytes, at least 0; a value no integer holds
    (NaN, infinite) as it came, for `validated` to refuse (`int()` of it raised)."""
    return max(0, int(value)) if math.isfinite(value) else value


def _why(row: tuple[Any, ...], name: str, error: Any) -> str:
    """Which reading, and its invalid field: `i-0abc GPU 0 at 12:03Z: mem_used_bytes 1e+30:
    Input should be ...`."""
    minute = row[MINUTE]
    at = minute.strftime("%Y-%m-%d %H:%MZ") if isinstance(minute, datetime) else minute
    return (f"{_shown(row[INSTANCE])} GPU {_shown(row[GPU])} at {_shown(at)}: "
            f"{name} {_shown(error.get('input'), quoted=True)}: {error['msg']}")


SHOWN = 40  # characters of a value a log line shows: a forged value may be any length


def _shown(value: Any, *, quoted: bool = False) -> str:
    """`value` as a log line shows it (its repr when `quoted`), cut to `SHOWN` characters:
    an integer too long for Python to print (over 4,300 digits) said so, not raised."""
    try:
        text = repr(value) if quoted else str(value)
    except ValueError:
        return f"<a number of {value.bit_length() * 0.30103:.0f} digits>"
    return text if len(text) <= SHOWN else f"{text[:SHOWN - 3]}..."
