"""Reading and writing the NVML trace format of the shared H100 recording."""

from __future__ import annotations

import io
from datetime import timedelta
from importlib import resources
from pathlib import Path

import pytest

from costguard.telemetry.summary import phase_profiles, summarize_windows
from costguard.telemetry.trace import (
    NvmlSample,
    ProcessMemory,
    TraceError,
    TraceWriter,
    packaged_trace,
    parse_trace,
    read_trace,
    write_trace,
)

SHARED = Path("/work/shared/fixtures/nvml/h100_phases.jsonl")
PACKAGED = resources.files("costguard.telemetry") / "data" / "h100_phases.jsonl"


@pytest.mark.skipif(not SHARED.exists(), reason="shared fixture not on this machine")
def test_packaged_trace_is_byte_identical_to_the_shared_recording():
    assert PACKAGED.read_bytes() == SHARED.read_bytes()


def test_reading_then_writing_the_recording_reproduces_it_byte_for_byte():
    trace = packaged_trace()
    out = io.StringIO()
    write_trace(out, trace)
    assert out.getvalue() == PACKAGED.read_text(encoding="utf-8")


def test_samples_are_typed_with_nvml_refusals_kept_as_errors():
    trace = packaged_trace()
    assert trace.header["name"] == "NVIDIA H100 80GB HBM3"
    assert trace.header["gpm_supported"] is True
    assert len(trace.samples) == 472
    first = trace.samples[0]
    assert first.phase == "no_process"
    assert first.gpu == 0
    assert first.mem_total == 85_520_809_984
    assert first.processes == ()
    assert first.process_util is None  # NVML said NotFound: no process ran
    assert first.errors["process_util"] == "NVMLError_NotFound: Not Found"
    assert first.sm_active == 0.0
    held = phase_profiles()["held_memory_idle"][5]
    assert held.processes == (ProcessMemory(pid=456, used_bytes=20_814_233_600),)
    busy = phase_profiles()["busy_matmul"]
    assert max(s.sm_active or 0 for s in busy) > 95


def test_phase_profiles_cover_the_five_recorded_workloads():
    profiles = phase_profiles()
    for name in (
        "no_process",
        "busy_matmul",
        "held_memory_idle",
        "bursty_2s_of_10s",
        "tiny_kernels",
    ):
        assert len(profiles[name]) >= 60, name
        assert {s.phase for s in profiles[name]} == {name}


def test_per_minute_summary_of_the_recording_matches_the_readme_means():
    samples = phase_profiles()["tiny_kernels"]
    (minute,) = summarize_windows(
        samples, provider="aws", instance_id="i", origin=samples[0].t, window=timedelta(seconds=60)
    )
    assert minute.samples == 62
    assert minute.util_mean == pytest.approx(12.2, abs=0.05)
    assert minute.sm_mean is not None and minute.sm_mean < 0.05
    assert minute.top_process_pid == 542
    assert minute.process_count == 1
    assert minute.util_active_share is not None and minute.util_active_share > 0.9
    assert minute.power_w_mean is not None and 60 < minute.power_w_mean < 200


def test_writer_and_reader_agree_on_gpu_index_and_errors(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    sample = NvmlSample(
        t=1.5,
        gpu=3,
        util_gpu=None,
        errors={"util_gpu": "NVMLError_NotSupported: Not Supported"},
        processes=None,
        process_util=(),
    )
    with path.open("w") as fh:
        TraceWriter(fh, {"name": "x"}).write(sample)
    back = read_trace(path)
    assert back.header == {"header": True, "name": "x"}
    assert back.samples[0].gpu == 3
    assert back.samples[0].util_gpu is None
    assert back.samples[0].errors["util_gpu"].startswith("NVMLError_NotSupported")
    assert back.samples[0].processes is None


def test_a_broken_line_is_reported_with_file_and_line(tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"header": true}\n{"t": 1, "util_gpu": 3}\n{"t": oops}\n')
    with pytest.raises(TraceError, match=r"bad.jsonl:3: not JSON"):
        read_trace(path)
    with pytest.raises(TraceError, match=r":2: bad sample"):
        parse_trace(['{"header": true}', '{"util_gpu": 3}'], "x.jsonl")
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "missing.jsonl")
