"""Readings of any cloud or agent, packed as the reading window packs them
(`store/packed.py`): a hypothesis strategy and the view of them, for the tests of the
packed view (tests/store) and of the verdict read from it (tests/telemetry)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from costguard.model import GpuMinute, TelemetrySource
from costguard.store.packed import Rows, pack_minute
from costguard.store.packed_view import PackedReadings

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SOURCES = list(TelemetrySource)

pct = st.one_of(st.none(), st.floats(0, 100), st.sampled_from([0.0, 4.99, 5.0, 9.99, 10.0]))
count = st.one_of(st.none(), st.integers(0, 2**31 - 1))
size = st.one_of(st.none(), st.integers(0, 2**63 - 1))


@st.composite
def readings(draw: st.DrawFn) -> GpuMinute:
    agent = draw(st.booleans())
    fields = {
        "provider": "aws", "instance_id": "i-1", "gpu_index": draw(st.integers(0, 3)),
        "minute": NOW - timedelta(minutes=draw(st.integers(0, 150)),
                                  seconds=draw(st.sampled_from([0, 0, 17]))),
        "source": draw(st.sampled_from(SOURCES)),
        "span_minutes": draw(st.sampled_from([1, 1, 1, 5, 60])),
        "util_mean": draw(pct), "util_max": draw(pct), "sm_mean": draw(pct),
        "sm_max": draw(pct),
    }
    if agent:  # what only the agent measures widens the record
        fields.update(util_p95=draw(pct), sm_p95=draw(pct), mem_used_bytes=draw(size),
                      process_count=draw(count), top_process_pid=draw(count),
                      top_process_bytes=draw(size))
    return GpuMinute(**fields)


def packed(minutes: list[GpuMinute], start: datetime, end: datetime) -> PackedReadings:
    rows = Rows()
    for m in minutes:
        rows.append(pack_minute(m))
    return rows.view(start.timestamp(), end.timestamp())
