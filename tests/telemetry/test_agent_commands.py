"""The functions behind `costguard agent`, `agent record FILE` and `agent replay FILE`."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from importlib import resources
from itertools import pairwise
from pathlib import Path

import pynvml
import pytest

from costguard.clock import ManualClock
from costguard.errors import ConfigError
from costguard.telemetry.agent import AgentSettings
from costguard.telemetry.buffer import DiskBuffer
from costguard.telemetry.commands import parse_duration, record, replay, run_agent
from costguard.telemetry.ingest import MemorySink, telemetry_app
from costguard.telemetry.nvml import NvmlSampler, NvmlUnavailable
from costguard.telemetry.trace import TraceError, packaged_trace, read_trace, write_trace
from tests.fakes.loopback import free_port, serve
from tests.telemetry.agent_helpers import START
from tests.telemetry.fake_nvml import FakeGpu, FakeNvml
from tests.telemetry.servers import metadata_app

TRACE = str(resources.files("costguard.telemetry") / "data" / "h100_phases.jsonl")


def windows(path: str, **kw: object) -> list[dict[str, object]]:
    return [json.loads(line) for line in replay(path, **kw)]  # type: ignore[arg-type]


def by_phase(rows: list[dict[str, object]]) -> dict[object, list[dict[str, object]]]:
    out: dict[object, list[dict[str, object]]] = {}
    for row in rows:
        out.setdefault(row["phase"], []).append(row)
    return out


def test_replay_prints_one_json_object_per_30s_window():
    rows = windows(TRACE, window=timedelta(seconds=30))
    assert len(rows) == 8  # 236 s of recording
    starts = [r["start"] for r in rows]
    assert all(b - a == 30 for a, b in pairwise(starts))  # type: ignore[operator]
    for row in rows:
        assert set(row) >= {"start", "end", "verdict", "signal", "evidence", "coverage"}
        assert row["end"] == row["start"] + 30  # type: ignore[operator]
        assert row["signal"] == "sm_active"
    phases = by_phase(rows)
    assert phases["no_process"][0]["verdict"] == "idle"
    assert phases["busy_matmul"][0]["verdict"] == "active"
    assert {r["verdict"] for r in phases["bursty_2s_of_10s"]} == {"active"}
    tiny = phases["tiny_kernels"][0]
    assert tiny["verdict"] == "idle"
    assert "tiny kernels" in str(tiny["evidence"])


def test_replay_without_gpm_reports_the_util_gpu_fallback(tmp_path: Path):
    trace = packaged_trace()
    stripped = replace(trace, samples=[replace(s, gpm=None) for s in trace.samples])
    path = tmp_path / "no_gpm.jsonl"
    with path.open("w") as fh:
        write_trace(fh, stripped)
    rows = windows(str(path), window=timedelta(seconds=30))
    assert {r["signal"] for r in rows} == {"util_gpu"}
    assert by_phase(rows)["tiny_kernels"][0]["verdict"] == "active"  # what util_gpu believes
    assert all("fell back to util_gpu" in str(r["evidence"]) for r in rows)


def test_replay_text_format_and_explicit_signal():
    lines = list(replay(TRACE, timedelta(minutes=1), "text", "util_gpu"))
    assert len(lines) == 4
    assert all(" util_gpu " in line for line in lines)
    assert lines[0].split()[1] in {"idle", "active", "underused"}


def test_replay_of_a_missing_or_broken_file_says_what_is_wrong(tmp_path: Path):
    with pytest.raises(TraceError, match="no such file"):
        list(replay(tmp_path / "nope.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    with pytest.raises(TraceError, match=r"bad\.jsonl:1"):
        list(replay(bad))


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("45m", 2700), ("2h", 7200), ("1m30s", 90), ("1d", 86400)]
)
def test_durations_read_like_people_write_them(text: str, seconds: int):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["soon", "-5m", "0s", "", "90", "1.5m"])
def test_bad_durations_say_how_to_write_them(text: str):
    with pytest.raises(ConfigError):
        parse_duration(text)


def test_record_writes_the_trace_format_from_nvml(tmp_path: Path):
    clock = ManualClock(START)
    nvml = FakeNvml([FakeGpu(util=55, sm_util=50.0), FakeGpu()])
    sampler = NvmlSampler(nvml, clock=lambda: clock.now().timestamp())
    path = tmp_path / "rec.jsonl"
    written = record(
        path,
        timedelta(seconds=10),
        sampler,
        clock=clock,
        sleep=lambda s: clock.advance(timedelta(seconds=s)),
    )
    assert written == 20
    trace = read_trace(path)
    assert trace.header["header"] is True and trace.header["count"] == 2
    assert trace.header["period_s"] == 1.0
    assert [s.gpu for s in trace.samples[:2]] == [0, 1]
    assert trace.samples[-2].sm_active == pytest.approx(50.0)
    assert trace.samples[-1].t - trace.samples[0].t == 9


def test_record_without_a_driver_fails_clearly_and_writes_nothing(tmp_path: Path):
    sampler = NvmlSampler(FakeNvml([], init_error=pynvml.NVMLError_DriverNotLoaded))
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        record(tmp_path / "rec.jsonl", timedelta(seconds=5), sampler)
    assert not (tmp_path / "rec.jsonl").exists()


def test_run_agent_end_to_end_identity_from_imds_pushes_and_records(tmp_path: Path):
    meta, _ = metadata_app(
        ec2={"instance-id": "i-0feedface", "placement/availability-zone": "eu-west-1a"}
    )
    sink = MemorySink()
    clock = ManualClock(START)
    nvml = FakeNvml([FakeGpu(util=12, sm_util=0.02, processes=[(77, 900_000_000)])])
    sampler = NvmlSampler(nvml, clock=lambda: clock.now().timestamp())
    sampler.open()
    with serve(meta) as meta_url, serve(telemetry_app(
            token="t0ken", sink=sink, clock=lambda: START + timedelta(hours=1))) as daemon:
        settings = AgentSettings(
            url=daemon,
            token="t0ken",
            buffer_path=tmp_path / "buffer.sqlite3",
            ec2_metadata_url=meta_url,
            gce_metadata_url=meta_url,
            record_path=tmp_path / "agent.jsonl",
        )
        agent = run_agent(
            settings,
            sampler=sampler,
            clock=clock,
            sleep=lambda s: clock.advance(timedelta(seconds=s)),
            max_ticks=150,
        )
    sampler.close()
    assert agent.identity.instance_id == "i-0feedface"
    assert [k[1:] for k in sink.order] == [
        ("i-0feedface", 0, START + timedelta(minutes=k)) for k in range(3)
    ]
    first = sink.rows[sink.order[0]]
    assert first.samples == 60 and first.util_mean == 12 and first.top_process_pid == 77
    assert len(DiskBuffer(settings.buffer_path)) == 0
    assert len(read_trace(tmp_path / "agent.jsonl").samples) == 150


def test_run_agent_needs_url_and_token(tmp_path: Path):
    settings = AgentSettings(url="", token="", buffer_path=tmp_path / "b")
    with pytest.raises(ConfigError, match="COSTGUARD_AGENT_TOKEN"):
        run_agent(settings)


def test_run_agent_off_the_cloud_without_identity_is_a_config_error(tmp_path: Path):
    nowhere = f"http://127.0.0.1:{free_port()}"
    settings = AgentSettings(
        url=nowhere,
        token="x",
        buffer_path=tmp_path / "b",
        ec2_metadata_url=nowhere,
        gce_metadata_url=nowhere,
    )
    with pytest.raises(ConfigError, match="--instance-id"):
        run_agent(settings)


def test_the_agent_alone_loads_neither_boto3_nor_the_daemon_settings():
    """costguard-agent stays small (BENCHMARKS.md agent-overhead): the AWS SDK and the full
    settings come in only when asked for (--publish-to cloudwatch, or an error report)."""
    import subprocess
    import sys

    code = ("import sys, costguard.telemetry.cli, costguard.telemetry.commands; "
            "print(sorted(m for m in ('boto3', 'botocore', 'costguard.config') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"


def test_a_recording_cut_short_mid_line_replays_without_its_last_line(tmp_path: Path):
    # the recorder stopped (Ctrl-C, the host's end) while it wrote its last sample: that
    # line is left out and said so; the recording was refused whole before
    whole = Path(TRACE).read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(whole[:-40])
    notes: list[str] = []
    rows = [json.loads(line) for line in replay(cut, note=notes.append)]
    assert notes == [f"note: {cut}:473: the last line is cut short (the recording stopped "
                     "while writing it); replayed without it"]
    assert read_trace(cut).torn_line == 473 and len(read_trace(cut).samples) == 471
    assert [r["verdict"] for r in rows] == [r["verdict"] for r in windows(TRACE)]
    # a line that is not JSON, and a newline after it, is a broken file wherever it is
    ends_bad = tmp_path / "ends-bad.jsonl"
    ends_bad.write_bytes(whole[:-40] + b"\n")
    mid_bad = tmp_path / "mid-bad.jsonl"
    mid_bad.write_bytes(whole[:-40] + b"\n" + whole.splitlines(keepends=True)[-1])
    for bad in (ends_bad, mid_bad):
        with pytest.raises(TraceError, match=rf"{bad.name}:473: not JSON \("):
            list(replay(bad))
    assert read_trace(TRACE).torn_line is None


def test_a_trace_of_some_of_a_host_s_gpus_is_replayed_as_those_gpus(tmp_path: Path):
    # a recording of GPU 3 alone (or of 2 and 5) is one GPU (two), not four GPUs of which
    # three said nothing: that read no-data throughout
    trace = packaged_trace()
    want = [(r["verdict"], r["value"]) for r in windows(TRACE)]
    for gpus in ((3,), (2, 5)):
        path = tmp_path / f"gpus-{len(gpus)}.jsonl"
        with path.open("w") as fh:
            write_trace(fh, replace(trace, samples=[replace(s, gpu=g) for s in trace.samples
                                                    for g in gpus]))
        rows = windows(str(path))
        assert [(r["verdict"], r["value"]) for r in rows] == want
        assert {r["gpus"] for r in rows} == {len(gpus)}
