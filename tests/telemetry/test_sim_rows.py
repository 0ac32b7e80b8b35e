"""The simulated cloud hands its readings over as rows (`MinuteRows`), as a real cloud's
provider does: each row is the reading `sim_minute` makes from the same draw, field for
field, and the simulated fleet's readings reach the store and the reading window as rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from random import Random

import pytest

from costguard.clock import ManualClock
from costguard.demo.sim import SimProvider, _reading_names
from costguard.demo.sim_settings import SimSettings
from costguard.minute_rows import LEAD, MinuteRows
from costguard.model import TelemetrySource
from costguard.telemetry.summary import PATTERN_PHASE, sim_minute, sim_row

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
HOST = {"host_cpu_pct": 97.0, "host_cpus": 48, "host_mem_total_bytes": 2**38,
        "mem_total_bytes": None}


@pytest.mark.parametrize("pattern", sorted(PATTERN_PHASE))
@pytest.mark.parametrize("gpm", [True, False])
def test_a_row_is_the_reading_sim_minute_draws(pattern: str, gpm: bool) -> None:
    names = _reading_names()
    minutes = [START + timedelta(minutes=k) for k in range(30)]
    want = [sim_minute(pattern, "sim", "i-0sim", g, m, Random(f"{pattern}{k}"), gpm=gpm,
                       extra=HOST)
            for k, m in enumerate(minutes) for g in range(4)]
    rows = MinuteRows(names, [
        sim_row(pattern, names, "sim", "i-0sim", g, m, Random(f"{pattern}{k}"), gpm=gpm,
                extra=HOST)
        for k, m in enumerate(minutes) for g in range(4)])
    got = list(rows)
    assert [m.model_dump() for m in got] == [m.model_dump() for m in want]
    # the draws differ from minute to minute: the rows are not one template repeated
    assert len({m.util_mean for m in got}) > 1 or pattern == "no_process"
    assert not gpm or any(m.sm_mean is not None for m in got) or pattern == "no_process"
    assert all(m.span_minutes == 1 and m.samples == 60 for m in got)


def test_a_field_the_row_has_no_place_for_is_refused() -> None:
    names = (*LEAD, "util_mean")
    with pytest.raises(KeyError, match="sets"):
        sim_row("busy", names, "sim", "i-0sim", 0, START, Random(1))


def test_the_simulated_cloud_answers_in_rows_of_every_running_gpu() -> None:
    clock = ManualClock(START + timedelta(hours=12))
    sim = SimProvider(SimSettings(instances=40), clock)
    gpu = [i for i in sim.list_instances().instances if i.has_gpu][:6]
    start = clock.now() - timedelta(minutes=10)
    readings = sim.gpu_metrics(gpu, start, clock.now())
    assert isinstance(readings, MinuteRows)
    assert readings.names == _reading_names()
    assert len(readings) > 0
    by_instance = {(m.instance_id, m.gpu_index) for m in readings}
    assert {iid for iid, _ in by_instance} <= {i.instance_id for i in gpu}
    for m in readings:
        assert m.source is TelemetrySource.SIM and m.provider == "sim"
        assert start <= m.minute < clock.now()
        assert m.host_cpus is not None  # the host's figures ride along, as before
