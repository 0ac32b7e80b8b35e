"""A cloud's GPU metrics as readings, each validated on its own: `validated`.

A cloud's GPU metrics are written by the hosts: the CloudWatch agent's PutMetricData, the Ops
Agent's time series. Anyone who may write a metric in the account or project can write any
value, dimension or label there: a GPU index past 2**31, a memory figure past 2**63 bytes,
a value that is not a number. Validated as one list, one such point failed the whole call,
and with it every cycle of the daemon (no actions, no alerts, nothing accrued, in every
account), for as long as the point stayed in the metrics' lookback.

Each reading is validated on its own. One that fails is dropped: that GPU-minute has no data,
which is never idle. The drop is logged once per call, with how many, and the first few
instances, GPU, minute and field, so a forged or broken series can be found; a call counts
its drops (`Dropped`, `providers.base.Readings.dropped`), and the cycle reports them
(`readings_dropped` in its summary, `costguard_cloud_readings_dropped_total` on /metrics): an
agent that writes a field no reading can hold (every memory figure, say) leaves its GPUs
without data, which nothing but that count shows.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from costguard.model import GpuMinute

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


def validated(rows: Iterable[Mapping[str, Any]], scope: str, dropped: Dropped | None = None
              ) -> list[GpuMinute]:
    """`rows` (GpuMinute field dicts read from `scope`'s metrics) as readings, less those
    that are not valid readings, which are logged (and counted in `dropped`)."""
    out: list[GpuMinute] = []
    rejected: list[str] = []
    build = GpuMinute.model_validate
    for fields in rows:
        try:
            out.append(build(fields))
        except ValidationError as exc:
            rejected.append(_why(fields, exc))
    if rejected:
        if dropped is not None:
            dropped.add(len(rejected))
        more = len(rejected) - NAMED
        log.warning("%s: %d GPU reading%s dropped, not valid readings (no data, never idle): "
                    "%s%s", scope, len(rejected), "" if len(rejected) == 1 else "s",
                    "; ".join(rejected[:NAMED]), f"; and {more} more" if more > 0 else "")
    return out


def busiest(row: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """Merge another series' `fields` of the same GPU and minute into `row`: the larger of
    each figure (a NaN, from either, stays NaN, for `validated` to refuse). Series that claim
    the same GPU are all read, and points or series anyone adds can then only make it look
    busier, never idle."""
    for key, value in fields.items():
        held = row.get(key)
        if (held is None or value != value
                or (value is not None and held == held and value > held)):
            row[key] = value


def whole_bytes(value: float) -> int | float:
    """A byte count read from a metric as whole bytes, at least 0; a value no integer holds
    (NaN, infinite) as it came, for `validated` to refuse (`int()` of it raised)."""
    return max(0, int(value)) if math.isfinite(value) else value


def _why(fields: Mapping[str, Any], exc: ValidationError) -> str:
    """Which reading, and its first invalid field: `i-0abc GPU 0 at 12:03Z: mem_used_bytes
    1e+30: Input should be ...`."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    minute = fields.get("minute")
    at = minute.strftime("%Y-%m-%d %H:%MZ") if isinstance(minute, datetime) else minute
    return (f"{fields.get('instance_id')} GPU {fields.get('gpu_index')} at {at}: "
            f"{where} {first.get('input')!r}: {first['msg']}")
