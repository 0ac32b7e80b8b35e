"""Host activity as corroboration, on host traces recorded with the agent's own reader
(tests/fixtures/host, made by scripts/record_host_activity.py): each kind of work in
progress is idle-but-busy, the idle box and the notebook left alone are not; and the reader
itself, on this machine's real counters, a real Jupyter-shaped server and a terminal."""

from __future__ import annotations

import json
import os
import time
from collections import namedtuple
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psutil
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from costguard.model import GpuMinute, TelemetrySource
from costguard.policy.conditions import HostActivity
from costguard.telemetry.activity import (
    ActivityReader,
    ActivitySample,
    ProcTimes,
    minute_fields,
    parse_kernels,
    read_recording,
    replay,
)
from costguard.telemetry.corroborate import host_activity
from tests.fakes.loopback import serve

HOST = Path(__file__).resolve().parents[1] / "fixtures" / "host"
BUSY = ("dataset_copy", "dataset_download", "checkpoint_write", "cpu_preprocessing",
        "notebook_recent_input")
QUIET = ("idle", "notebook_idle_kernel")


def recorded(name: str) -> list[GpuMinute]:
    """A recording replayed as the agent summarizes it: one GPU-minute per whole minute,
    stamped at the minutes the recording covered."""
    lines = (HOST / f"{name}.jsonl").read_text().splitlines()
    out = []
    for minute, host, per_gpu in replay(read_recording(lines)):
        figures = {**host, **per_gpu.get(0, {})}
        out.append(GpuMinute.model_validate({
            "provider": "aws", "instance_id": "i-rec", "gpu_index": 0, "samples": 60,
            "minute": datetime.fromtimestamp(minute, UTC), "source": TelemetrySource.AGENT,
            "sm_mean": 0.0, "sm_max": 0.0, **figures}))
    return out


def verdict(name: str):  # type: ignore[no-untyped-def]
    """The recording judged at the end of its last minute (its 3-4 minutes are all within
    the default `recent` 10 minutes)."""
    minutes = recorded(name)
    return host_activity(minutes, minutes[-1].minute + timedelta(minutes=1))


@pytest.mark.parametrize("name", BUSY)
def test_each_recorded_kind_of_work_in_progress_is_busy(name: str) -> None:
    v = verdict(name)
    assert v.measured
    assert v.busy, f"{name}: {v.evidence}"


@pytest.mark.parametrize("name", QUIET)
def test_the_idle_box_and_the_notebook_left_alone_are_quiet(name: str) -> None:
    v = verdict(name)
    assert v.measured
    assert not v.busy, f"{name}: {v.evidence}"


def test_the_evidence_names_what_was_busy_with_its_figure() -> None:
    assert "disk" in verdict("dataset_copy").evidence
    assert "1 pegged" in verdict("cpu_preprocessing").evidence
    assert "network up to 25" in verdict("dataset_download").evidence
    assert "Jupyter kernel" in verdict("notebook_recent_input").evidence
    quiet = verdict("idle").evidence
    assert quiet.startswith("host quiet (last 10 min): CPU ")
    assert "disk " in quiet and "network " in quiet


def test_the_defaults_sit_between_the_recordings_with_margin() -> None:
    """The measured figures the defaults were chosen between (docs/agent.md quotes them)."""
    rules = HostActivity()

    def peak(name: str, field: str) -> float:
        values = [getattr(m, field) for m in recorded(name) if getattr(m, field) is not None]
        return max(values)

    quiet_disk = max(peak(n, "host_disk_bps") for n in QUIET) / 1e6
    assert quiet_disk * 4 < rules.disk_mb_s, quiet_disk
    assert peak("dataset_copy", "host_disk_bps") / 1e6 > 2 * rules.disk_mb_s
    quiet_net = max(peak(n, "host_net_bps") for n in QUIET) / 1e6
    assert quiet_net * 4 < rules.net_mb_s, quiet_net
    cores = [m.host_cpu_pct * m.host_cpus / 100 for n in QUIET for m in recorded(n)
             if m.host_cpu_pct is not None and m.host_cpus]
    assert max(cores) * 10 < rules.cpu_cores, cores
    assert max(peak(n, "host_hot_cores") for n in QUIET) == 0 < rules.hot_cores
    assert peak("cpu_preprocessing", "host_hot_cores") >= rules.hot_cores
    assert peak("dataset_download", "host_net_bps") / 1e6 > 2 * rules.net_mb_s


# -- the reader's arithmetic ---------------------------------------------------------------

def sample(t: float, **fields: object) -> ActivitySample:
    return ActivitySample(t=t, **fields)  # type: ignore[arg-type]


def test_rates_run_from_the_previous_minutes_last_sample() -> None:
    base = sample(59.0, disk_bytes=1_000, net_bytes=0)
    samples = [sample(60.0 + i, disk_bytes=1_000 + 50_000_000 * (i + 1), net_bytes=2_000 * i)
               for i in range(60)]
    host, _ = minute_fields(base, samples, {})
    assert host["host_disk_bps"] == pytest.approx(50_000_000.0)
    assert host["host_net_bps"] == pytest.approx(2_000 * 59 / 60, rel=1e-3)


def test_a_counter_that_went_backwards_gives_no_figure() -> None:
    host, _ = minute_fields(sample(0.0, disk_bytes=10**9), [sample(60.0, disk_bytes=5)], {})
    assert "host_disk_bps" not in host


def test_the_gpu_processes_cpu_and_age_and_a_reused_pid() -> None:
    first = sample(0.0, procs={7: ProcTimes(100.0, -600.0), 8: ProcTimes(5.0, -30.0)})
    last = sample(60.0, procs={7: ProcTimes(130.0, -600.0),  # 30 s of CPU in 60 s: 50 %
                               8: ProcTimes(1.0, 55.0)})  # pid 8 reused by a new process
    _, per_gpu = minute_fields(None, [first, last], {0: {7}, 1: {8}})
    assert per_gpu[0] == {"gpu_proc_cpu_pct": 50.0, "gpu_proc_age_s": 660.0}
    assert per_gpu[1] == {"gpu_proc_age_s": 5.0}  # its CPU cannot be told from the old one's


def test_sessions_and_kernels_come_from_the_minutes_last_reading() -> None:
    end = sample(120.0, sessions=2, input_idle_s=42.0,
                 kernels=(("idle", 30.0), ("busy", 100.0)))
    host, _ = minute_fields(sample(60.0), [sample(90.0), end], {})
    assert host == {"host_sessions": 2, "host_input_idle_s": 42.0, "kernels_busy": 1,
                    "kernel_idle_s": 20.0}


def test_input_and_kernel_idle_times_are_read_forward_to_the_judgement() -> None:
    start = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)

    def minutes(idle_at_end: float) -> list[GpuMinute]:
        # each minute's figure is taken at its end: 60 s more idle every minute
        return [GpuMinute(provider="aws", instance_id="i", minute=start + timedelta(minutes=k),
                          source=TelemetrySource.AGENT,
                          host_input_idle_s=idle_at_end - 60 * (9 - k)) for k in range(9)]

    # every minute says the same last input: judged at 09:10, 1,080 s (18 min) before
    late = host_activity(minutes(1080.0), start + timedelta(minutes=10))
    assert not late.busy and "last terminal input 18 min ago" in late.evidence
    soon = host_activity(minutes(540.0), start + timedelta(minutes=10))
    assert soon.busy and "last terminal input 9 min ago" in soon.evidence


def test_nothing_measured_is_not_busy_and_says_so() -> None:
    start = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    minutes = [GpuMinute(provider="aws", instance_id="i", minute=start + timedelta(minutes=k),
                         source=TelemetrySource.CLOUDWATCH, util_mean=0.0) for k in range(10)]
    v = host_activity(minutes, start + timedelta(minutes=10))
    assert not v.busy and not v.measured
    assert v.evidence == "host activity not measured"


def test_the_clouds_cpu_figure_alone_can_show_a_busy_host() -> None:
    start = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    minutes = [GpuMinute(provider="aws", instance_id="i", minute=start + timedelta(minutes=k),
                         source=TelemetrySource.CLOUDWATCH, host_cpu_pct=85.0)
               for k in range(10)]
    v = host_activity(minutes, start + timedelta(minutes=10))
    assert v.busy and "CPU 85%" in v.evidence


# -- the reader on this machine -----------------------------------------------------------

def test_the_reader_reads_this_hosts_real_counters_and_a_process() -> None:
    reader = ActivityReader()
    now = time.time()
    s = reader.sample(now, [os.getpid(), 2**22 + 12345])  # ours, and one that is not there
    assert set(s.procs) == {os.getpid()}
    assert s.procs[os.getpid()].started == pytest.approx(psutil.Process().create_time())
    assert s.net_bytes is None or s.net_bytes >= 0
    assert s.disk_bytes is None or s.disk_bytes >= 0
    assert s.sessions is None  # read only at a minute's end
    end = reader.sample(now + 1, [os.getpid()], minute_end=True)
    assert end.sessions is not None and end.kernels is None  # no Jupyter configured


User = namedtuple("User", "name terminal host started pid")


def test_input_idle_is_the_terminals_access_time(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pts").mkdir()
    now = time.time()
    for name, ago in (("pts/3", 600.0), ("pts/4", 75.0)):
        (tmp_path / name).touch()
        os.utime(tmp_path / name, (now - ago, now - ago))
    monkeypatch.setattr(psutil, "users", lambda: [
        User("ana", "pts/3", "10.0.0.5", now - 3600, 100),
        User("bo", "pts/4", "10.0.0.6", now - 60, 101),
        User("svc", None, "", now, 102)])  # no terminal: counted, no input to read
    s = ActivityReader(dev=tmp_path).sample(now, [], minute_end=True)
    assert s.sessions == 3
    assert s.input_idle_s == pytest.approx(75.0, abs=0.5)


# jupyter_server's GET /api/kernels, as the recordings' server (jupyter_server 2) answered
KERNELS = [{"id": "5c3d6f1e-8b0a-4c59-9d8e-2f3a4b5c6d7e", "name": "python3",
            "last_activity": "2026-12-02T00:32:25.119385Z", "execution_state": "idle",
            "connections": 0},
           {"id": "0f9e8d7c-6b5a-4a39-8271-605f4e3d2c1b", "name": "python3",
            "last_activity": "2026-12-02T00:47:01.552018Z", "execution_state": "busy",
            "connections": 1}]


def test_kernels_are_read_from_a_server_that_answers_without_a_token() -> None:
    async def kernels(request: Request) -> JSONResponse:
        return JSONResponse(KERNELS)

    async def locked(request: Request) -> JSONResponse:
        return JSONResponse({"message": "Forbidden", "reason": None}, status_code=403)

    async def huge(request: Request) -> StreamingResponse:
        async def endless():  # type: ignore[no-untyped-def]
            yield b"["
            for _ in range(500):  # 22 MB, where a gigabyte would do the same
                yield b'{"last_activity": "2026-12-02T00:00:00Z"},' * 1_000

        return StreamingResponse(endless(), media_type="application/json")

    async def odd(request: Request) -> JSONResponse:
        return JSONResponse([{"last_activity": "9999-12-31T23:59:59Z"}, 5000 * "9"])

    app = Starlette(routes=[Route("/open/api/kernels", kernels), Route("/locked/api/kernels",
                                                                      locked),
                            Route("/huge/api/kernels", huge), Route("/odd/api/kernels", odd)])
    with serve(app) as url, httpx.Client() as client:
        open_reader = ActivityReader(jupyter_urls=[f"{url}/open"], client=client)
        s = open_reader.sample(time.time(), [], minute_end=True)
        assert s.kernels == tuple(parse_kernels(KERNELS))
        assert s.kernels[1][0] == "busy"
        # a token wanted, nobody there, an answer without end, a malformed one: not measured
        for bad in (f"{url}/locked", "http://127.0.0.1:9", f"{url}/huge", f"{url}/odd"):
            reader = ActivityReader(jupyter_urls=[bad], client=client)
            assert reader.sample(time.time(), [], minute_end=True).kernels is None, bad


def _self_signed(tmp: Path) -> tuple[str, str]:
    """A certificate for localhost signed by its own key, as a notebook's server has."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=1)).not_valid_after(now + timedelta(days=1))
            .sign(key, hashes.SHA256()))
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return str(tmp / "cert.pem"), str(tmp / "key.pem")


def test_a_loopback_server_over_https_with_its_own_certificate_is_read(tmp_path: Path) -> None:
    """A SageMaker notebook instance's Jupyter answers on https://127.0.0.1:8443 with a
    self-signed certificate: read on loopback without verifying it, while the configured
    client (every other server's, and the daemon's) still verifies."""
    async def kernels(request: Request) -> JSONResponse:
        return JSONResponse(KERNELS)

    app = Starlette(routes=[Route("/api/kernels", kernels)])
    with serve(app, tls=_self_signed(tmp_path)) as url, httpx.Client() as client:
        assert url.startswith("https://127.0.0.1:")
        reader = ActivityReader(jupyter_urls=[url], client=client)
        assert reader.sample(time.time(), [], minute_end=True).kernels == tuple(
            parse_kernels(KERNELS))
        with pytest.raises(httpx.ConnectError):  # the configured client verifies
            client.get(f"{url}/api/kernels")


def test_a_recording_line_round_trips() -> None:
    s = ActivitySample(t=1.5, disk_bytes=3, net_bytes=4, procs={9: ProcTimes(1.25, 0.5)},
                       sessions=1, input_idle_s=2.0, kernels=(("idle", 1.0),))
    assert ActivitySample.from_json(s.as_json()) == s
    assert json.loads(s.as_json())["procs"] == {"9": [1.25, 0.5]}
