"""The agent's side of pre-stop hooks (telemetry/hooks.py) and the daemon's report route
(`POST /v1/hooks/{id}`): what a hook may be, what each kind reports, and who may report it."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlmodel import select

from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.sink import StoreHooks, StoreSink
from costguard.store.db import Database
from costguard.store.tables import StopHookRow
from costguard.telemetry.buffer import DiskBuffer
from costguard.telemetry.hooks import HookRunner, HookSpec, report_all
from costguard.telemetry.ingest import telemetry_app
from tests.fakes.cloud import T0
from tests.fakes.loopback import serve


@pytest.mark.parametrize("raw", [
    {"id": "", "kind": "signal", "signal": "SIGUSR1", "timeout_s": 10},
    {"id": "x" * 65, "kind": "signal", "signal": "SIGUSR1", "timeout_s": 10},
    {"id": "a", "kind": "shell", "timeout_s": 10},
    {"id": "a", "kind": "signal", "signal": "SIGKILL", "timeout_s": 10},
    {"id": "a", "kind": "signal", "signal": "SIGUSR1", "timeout_s": 0},
    {"id": "a", "kind": "signal", "signal": "SIGUSR1", "timeout_s": True},
    {"id": "a", "kind": "command", "timeout_s": 10 ** 9},
])
def test_a_hook_the_agent_will_not_run_is_refused(raw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        HookSpec.from_json(raw)


def test_a_command_hook_never_takes_a_command_line_from_the_daemon() -> None:
    spec = HookSpec.from_json({"id": "a", "kind": "command", "command": "rm -rf /",
                               "signal": "SIGUSR1", "timeout_s": 10})
    assert (spec.kind, spec.signal) == ("command", None)  # no field carries a command


def runner(tmp_path: Path, **kw: object) -> tuple[HookRunner, DiskBuffer]:
    buffer = DiskBuffer(tmp_path / "buffer.db")
    return HookRunner(buffer, **{"command": None, "gpu_pids": set, **kw}), buffer  # type: ignore[arg-type]


def outcome(r: HookRunner, spec: HookSpec) -> tuple[str, str] | None:
    assert r.submit(spec)
    r.join(60)
    return r.result(spec.id)


def test_no_process_on_the_gpus_is_nothing_to_checkpoint(tmp_path: Path) -> None:
    r, _ = runner(tmp_path)
    assert outcome(r, HookSpec("h1", "signal", "SIGUSR1", 10)) == (
        "skipped", "no process held a GPU: nothing to checkpoint")


def test_a_process_that_cannot_be_signalled_fails_the_hook_and_says_why(tmp_path: Path) -> None:
    def refuse(pid: int, sig: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    r, _ = runner(tmp_path, gpu_pids=lambda: {4242}, kill=refuse)
    status, detail = outcome(r, HookSpec("h1", "signal", "SIGUSR1", 10)) or ("", "")
    assert status == "failed"
    assert detail == ("SIGUSR1 reached no process holding a GPU (pid 4242: Operation not "
                      "permitted)")


def test_a_process_that_keeps_running_had_its_time_to_checkpoint(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c",
                                "import signal, time\n"
                                "signal.signal(signal.SIGUSR2, lambda *a: None)\n"
                                "print('ready', flush=True)\n"
                                "while True: time.sleep(0.1)"], stdout=subprocess.PIPE)
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline() == b"ready\n"
        ticks = iter(range(1000))
        r, _ = runner(tmp_path, gpu_pids=lambda: {sleeper.pid},
                      clock=lambda: float(next(ticks)), sleep=lambda s: None)
        status, detail = outcome(r, HookSpec("h1", "signal", "SIGUSR2", 30)) or ("", "")
        assert status == "succeeded"
        assert detail == (f"SIGUSR2 to pid {sleeper.pid}; 1 still running after 30 s, the "
                          "time they had to checkpoint")
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_command_succeeds_fails_or_is_skipped(tmp_path: Path) -> None:
    ok, _ = runner(tmp_path / "a", command=f"touch {tmp_path / 'done'}")
    assert outcome(ok, HookSpec("h1", "command", None, 10))[0] == "succeeded"  # type: ignore[index]
    assert (tmp_path / "done").exists()
    bad, _ = runner(tmp_path / "b", command="echo 'no space left' >&2; exit 4")
    assert outcome(bad, HookSpec("h1", "command", None, 10)) == (
        "failed", "exit 4 after 0 s: no space left")
    none, _ = runner(tmp_path / "c")
    assert outcome(none, HookSpec("h1", "command", None, 10)) == (
        "skipped", "no --pre-stop-command is configured on this host")


def test_each_hook_runs_once_and_is_reported_until_acknowledged(tmp_path: Path) -> None:
    r, buffer = runner(tmp_path, command=f"echo run >> {tmp_path / 'runs'}")
    spec = HookSpec("h1", "command", None, 10)
    assert outcome(r, spec) is not None
    assert r.submit(spec) is False  # handed out again: not run again
    posts: list[tuple[str, dict[str, object]]] = []
    answers = iter([None, 503, 200])

    def post(path: str, body: dict[str, object]) -> int | None:
        posts.append((path, body))
        return next(answers)

    assert report_all(buffer, post) == 0  # unreachable
    assert report_all(buffer, post) == 0  # 503: kept
    assert report_all(buffer, post) == 1
    assert report_all(buffer, post) == 0  # acknowledged: not sent again
    assert posts[-1] == ("/v1/hooks/h1", {"status": "succeeded", "detail": "exit 0 after 0 s"})
    assert (tmp_path / "runs").read_text() == "run\n"


# -- the daemon's route ------------------------------------------------------------------

TOKEN = "route-token"


def hook_row(db: Database, hook_id: str, instance_id: str = "i-a") -> None:
    with db.session() as s:
        s.add(StopHookRow(id=hook_id, stop_key=f"p|sim|{instance_id}|stop|1", policy="p",
                          provider="sim", instance_id=instance_id, kind="signal",
                          signal="SIGUSR1", timeout_s=60, status="requested", detail="",
                          requested_at=T0, deadline=T0 + timedelta(minutes=6)))


def test_the_report_route_answers_each_case_with_its_status(db: Database) -> None:
    hook_row(db, "0123456789abcdef0123456789abcdef")
    app = telemetry_app(token=TOKEN, sink=StoreSink(db, DaemonMetrics()), clock=lambda: T0,
                        hooks=StoreHooks(db))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with serve(app) as url, httpx.Client(base_url=url) as client:
        one = "/v1/hooks/0123456789abcdef0123456789abcdef"
        assert client.post(one, json={"status": "succeeded"}).status_code == 401
        for other in ("nope", "f" * 32, "%00" * 11, "x" * 5000):
            assert client.post(f"/v1/hooks/{other}", headers=auth,
                               json={"status": "failed"}).status_code == 404
        bad = client.post(one, headers=auth, json={"status": "done"})
        assert bad.status_code == 422 and "succeeded, failed, timed_out, skipped" in bad.text
        for body in (b"{", b"[1]", b'{"status": "failed", "detail": 3}',
                     b'{"status": ["failed"]}', b"\x00"):
            assert client.post(one, headers=auth, content=body).status_code in (400, 422)
        ok = client.post(one, headers=auth, json={"status": "failed", "detail": "exit 1"})
        assert ok.status_code == 200
        again = client.post(one, headers=auth,
                            json={"status": "succeeded", "detail": "changed my mind"})
        assert again.status_code == 200
    with db.session() as s:
        row = s.exec(select(StopHookRow)).one()
    assert (row.status, row.detail, row.finished_at) == ("failed", "exit 1", T0)


def test_hooks_come_with_the_answer_to_an_agents_push(db: Database) -> None:
    hook_row(db, "a" * 32, "i-a")
    hook_row(db, "b" * 32, "i-b")
    app = telemetry_app(token=TOKEN, sink=StoreSink(db, DaemonMetrics()), clock=lambda: T0,
                        hooks=StoreHooks(db))
    minute = {"provider": "sim", "instance_id": "i-a", "gpu_index": 0, "source": "agent",
              "minute": (T0 - timedelta(minutes=1)).isoformat(), "util_mean": 0.0}
    with serve(app) as url:
        answer = httpx.post(f"{url}/v1/telemetry", json={"minutes": [minute]},
                            headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert answer["hooks"] == [{"id": "a" * 32, "provider": "sim", "instance_id": "i-a",
                                "kind": "signal", "signal": "SIGUSR1", "timeout_s": 60}]
    with db.session() as s:
        status = {r.id: (r.status, r.delivered_at) for r in s.exec(select(StopHookRow))}
    assert status == {"a" * 32: ("delivered", T0), "b" * 32: ("requested", None)}


def test_the_signal_really_reaches_a_process(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        r, _ = runner(tmp_path, gpu_pids=lambda: {child.pid})
        status, detail = outcome(r, HookSpec("h1", "signal", "SIGTERM", 20)) or ("", "")
        assert status == "succeeded" and "all exited after" in detail
        assert child.wait(5) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
