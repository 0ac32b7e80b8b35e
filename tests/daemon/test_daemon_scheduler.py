"""The scheduler: cycles never overlap, failures are counted per stage, shutdown is clean."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from costguard.clock import ManualClock
from costguard.costs.price_book import PriceBook
from costguard.daemon.scheduler import Daemon, failed_stage
from costguard.model import GpuMinute, Instance
from costguard.providers.base import FetchedPrices
from costguard.redact import secrets_of
from costguard.store.db import Database
from tests.daemon.daemon_helpers import (
    START,
    build_engine,
    captured_logs,
    free_port,
    get,
    quiet_daemon,
    scripted_cloud,
    wait_until,
)
from tests.fakes.cloud import ScriptedCloud

REPO = Path(__file__).resolve().parents[2]


class SlowCloud(ScriptedCloud):
    """Inventory takes `delay` seconds and records how many listings run at once."""

    def __init__(self, clock: ManualClock, delay: float) -> None:
        super().__init__(clock)
        self.delay, self.running, self.most = delay, 0, 0
        self._lock = threading.Lock()

    def list_instances(self):  # type: ignore[no-untyped-def]
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(self.delay)
        with self._lock:
            self.running -= 1
        return super().list_instances()


class BrokenMetrics(ScriptedCloud):
    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        # a bug, not a cloud error: a ProviderError here is a recorded gap, and the cycle goes on
        raise RuntimeError("metrics parser broke")


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(f"sqlite:///{tmp_path / 'cg.db'}")


def test_a_cycle_that_overruns_is_never_run_twice_at_once(db: Database) -> None:
    clock = ManualClock(START)
    cloud = SlowCloud(clock, delay=0.4)
    cloud.add("i-1", lambda m: "busy")
    daemon = Daemon(build_engine(db, cloud, clock), build_engine(db, cloud, clock).settings,
                    quiet_daemon())
    threads = [threading.Thread(target=daemon.cycle_job) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cloud.most == 1
    assert daemon.cycles_run == 1
    assert daemon.metrics.skipped._value.get() == 3


def test_the_scheduler_runs_cycles_on_its_interval_and_stops_cleanly(db: Database) -> None:
    clock = ManualClock(START)
    cloud = SlowCloud(clock, delay=0.3)  # longer than the interval: ticks must coalesce
    cloud.add("i-1", lambda m: "busy")
    engine = build_engine(db, cloud, clock, poll=timedelta(seconds=0.2))
    daemon = Daemon(engine, engine.settings, quiet_daemon(shutdown_grace=timedelta(seconds=5)))
    daemon.start()
    try:
        wait_until(lambda: daemon.cycles_run >= 3, 10, "three cycles")
    finally:
        assert daemon.shutdown() is True
    assert cloud.most == 1
    done = daemon.cycles_run
    time.sleep(0.5)
    assert daemon.cycles_run == done  # nothing runs after shutdown


def test_shutdown_gives_up_on_a_stuck_cycle_and_fences_it_off(db: Database) -> None:
    clock = ManualClock(START)
    cloud = SlowCloud(clock, delay=1.5)
    cloud.add("i-1", lambda m: "busy")
    engine = build_engine(db, cloud, clock, poll=timedelta(seconds=5))
    daemon = Daemon(engine, engine.settings,
                    quiet_daemon(shutdown_grace=timedelta(seconds=0.2)))
    daemon.start()
    wait_until(lambda: cloud.running == 1, 5, "a cycle in flight")
    assert daemon.shutdown() is False
    assert daemon.fence() is False  # what is still running may not touch the cloud
    # let the abandoned cycle end here (it logs its stages, then frees the work lock): its
    # log lines must not land in the next test's capture
    wait_until(lambda: not daemon._work_lock.locked(), 10, "the abandoned cycle to end")


def test_a_failed_stage_is_counted_and_logged_and_the_next_cycle_runs(db: Database) -> None:
    clock = ManualClock(START)
    cloud = BrokenMetrics(clock)
    cloud.add("i-1", lambda m: "busy")
    engine = build_engine(db, cloud, clock)
    daemon = Daemon(engine, engine.settings, quiet_daemon())
    with captured_logs("json") as logs:
        assert daemon.cycle_job() is None
        assert daemon.cycle_job() is None
    errors = daemon.metrics.errors.labels("telemetry", "all")._value.get()
    assert errors == 2
    assert daemon.state.last_error == "RuntimeError in telemetry"
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    assert [ln["stage"] for ln in lines if ln["msg"].startswith("cycle failed")] == [
        "telemetry", "telemetry"]


def _one_cycle_logged(db: Database, fmt: str) -> list[str]:
    clock = ManualClock(START)
    engine = build_engine(db, scripted_cloud(clock), clock)
    daemon = Daemon(engine, engine.settings, quiet_daemon())
    with captured_logs(fmt) as logs:
        daemon.cycle_job()
    return logs.getvalue().splitlines()


def test_each_stage_logs_one_line_with_counts_and_timing(db: Database) -> None:
    stages = [json.loads(line) for line in _one_cycle_logged(db, "json")]
    stages = [s for s in stages if "stage" in s and s["msg"].startswith("cycle ")]
    assert [s["stage"] for s in stages] == ["collect", "telemetry", "window", "accrue",
                                            "evaluate", "act", "alert"]
    collect = stages[0]
    assert collect["instances"] == 5 and collect["gaps"] == 0 and collect["seconds"] >= 0
    assert stages[4]["findings"] == 3
    # the process's CPU during each stage, beside its wall time
    assert all(s["cpu_seconds"] >= 0 for s in stages)
    assert sum(s["cpu_seconds"] for s in stages) > 0


def test_text_log_lines_name_each_field_once(db: Database) -> None:
    # #20 item 7: "cycle 1 stage act 0.015s warned=2 cycle=1 stage=act seconds=... warned=2"
    lines = [ln for ln in _one_cycle_logged(db, "text") if "stage=" in ln]
    assert len(lines) == 7
    for line in lines:
        keys = re.findall(r" (\w+)=", line)
        assert keys[:4] == ["cycle", "stage", "seconds", "cpu_seconds"], line
        assert len(keys) == len(set(keys)), line


def test_text_fields_stay_one_token_and_are_not_repeated_from_the_message() -> None:
    from costguard.daemon.logs import TextFormatter

    record = logging.makeLogRecord({"msg": "leader lost scope=aws/1", "levelname": "INFO",
                                    "name": "costguard.daemon", "scope": "aws/1",
                                    "reason": "lock taken by pod b"})
    line = TextFormatter().format(record)
    assert line.endswith('leader lost scope=aws/1 reason="lock taken by pod b"')
    record.msg = "leader lost scope=aws/12"  # the field's pair is in it only as a part
    assert TextFormatter().format(record).endswith(' scope=aws/1 reason="lock taken by pod b"')


def test_failed_stage_is_read_from_the_engine_frames() -> None:
    assert failed_stage(ValueError("no engine frame")) == "cycle"


def test_secrets_are_collected_from_settings(db: Database) -> None:
    clock = ManualClock(START)
    engine = build_engine(db, scripted_cloud(clock), clock, http={"ingest_token": "tok-xyz-1"})
    assert "tok-xyz-1" in secrets_of(engine.settings)


def _wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    def ready() -> bool:
        assert proc.poll() is None, "costguard run exited early"
        answer = get(f"{base}/readyz")
        return answer is not None and answer.status_code == 200 and \
            answer.json().get("last_cycle") is not None
    wait_until(ready, timeout, "the daemon to finish a cycle")


def test_costguard_run_serves_logs_json_without_secrets_and_stops_on_sigterm(
        tmp_path: Path) -> None:
    token = "sigterm-test-token-81f0"
    port = free_port()
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "idle.yml").write_text(
        (REPO / "policies" / "idle-gpu.yml").read_text())
    env = {**os.environ, "COSTGUARD_DATABASE_URL": f"sqlite:///{tmp_path / 'cg.db'}",
           "COSTGUARD_POLL_INTERVAL": "2s", "COSTGUARD_HTTP__PORT": str(port),
           "COSTGUARD_AGENT_TOKEN": token, "COSTGUARD_LOG_FORMAT": "json",
           "COSTGUARD_PROVIDERS__SIM__INSTANCES": "12"}
    log_path = tmp_path / "daemon.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "costguard"), "run"],
                                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(base, proc, 60)
        answer = httpx.post(f"{base}/v1/telemetry", json={"minutes": []},
                            headers={"Authorization": f"Bearer {token}x"})
        assert answer.status_code == 401
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert token not in text
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    msgs = [ln["msg"] for ln in lines]
    assert any(m.startswith("leader:") for m in msgs)
    assert any(ln.get("stage") == "act" for ln in lines)
    assert msgs[-1].startswith("shutdown complete")


class PricedCloud(ScriptedCloud):
    """A cloud with a price API: every (region, type) asked costs $1.25/h on demand."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.asked: list[tuple[list[str], list[str]]] = []

    def fetch_list_prices(self, regions: Sequence[str], instance_types: Sequence[str]
                          ) -> FetchedPrices:
        self.asked.append((list(regions), list(instance_types)))
        return FetchedPrices({(r, t, "on-demand"): 1.25 for r in regions
                              for t in instance_types}, "test price api")


def test_the_price_job_refreshes_the_fleet_s_prices_only_where_a_price_api_exists(
        db: Database) -> None:
    clock = ManualClock(START)
    priced = PricedCloud(clock)
    priced.add("i-1", lambda m: "busy", itype="g5.xlarge")
    engine = build_engine(db, priced, clock)
    daemon = Daemon(engine, engine.settings, quiet_daemon())
    assert daemon.prices_job() == 0  # no fleet in the store yet: nothing asked
    daemon.cycle_job()
    assert daemon.prices_job() == 1
    assert priced.asked[-1][1] == ["g5.xlarge"]
    with db.session() as s:
        book = PriceBook.load(s)
    assert [p.usd_per_hour for p in book.list_prices.values()] == [1.25]
    daemon.start()
    try:
        assert daemon.scheduler.get_job("prices") is not None
    finally:
        assert daemon.shutdown() is True
    plain = build_engine(db, scripted_cloud(clock), clock)
    other = Daemon(plain, plain.settings, quiet_daemon())
    other.start()
    try:  # the simulated cloud (no price API) never schedules it
        assert other.scheduler.get_job("prices") is None
    finally:
        assert other.shutdown() is True


def test_every_cycle_hands_what_it_freed_back_ok_or_failed(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import costguard.engine.cycle as cycle

    released: list[bool] = []

    def release() -> bool:
        released.append(True)
        return True

    monkeypatch.setattr(cycle, "release_freed_memory", release)
    clock = ManualClock(START)
    broken = BrokenMetrics(clock)
    broken.add("i-1", lambda m: "busy")
    engine = build_engine(db, broken, clock)
    assert Daemon(engine, engine.settings, quiet_daemon()).cycle_job() is None
    assert released == [True]
    other = Database(f"sqlite:///{tmp_path / 'ok.db'}")
    engine = build_engine(other, scripted_cloud(clock), clock)
    assert Daemon(engine, engine.settings, quiet_daemon()).cycle_job() is not None
    assert released == [True, True]


def test_the_prune_hands_what_it_freed_back_ok_or_failed(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    import costguard.daemon.scheduler as scheduler

    released: list[bool] = []
    monkeypatch.setattr(scheduler, "release_freed_memory", lambda: released.append(True))
    clock = ManualClock(START)
    engine = build_engine(db, scripted_cloud(clock), clock)
    daemon = Daemon(engine, engine.settings, quiet_daemon())
    assert daemon.prune_job() != {}
    assert released == [True]

    def broken(*_: object) -> dict[str, int]:
        raise RuntimeError("store gone")

    monkeypatch.setattr(scheduler, "prune_store", broken)
    assert daemon.prune_job() == {}
    assert released == [True, True]


class NotebookCloud(ScriptedCloud):
    """Writes what it learned to the memory the engine attaches, and reads it back."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.memory: Any = None
        self.found: Any = None

    def attach_memory(self, memory: Any) -> None:
        self.memory = memory
        self.found = memory.get("notes")

    def list_instances(self):  # type: ignore[no-untyped-def]
        self.memory.put("notes", {"learned": 1})
        return super().list_instances()


def test_the_engine_gives_a_fenced_provider_its_notebook_across_restarts(db: Database) -> None:
    from costguard.daemon.fence import fence_engine

    clock = ManualClock(START)
    first = NotebookCloud(clock)
    engine = build_engine(db, first, clock)
    fence_engine(engine, lambda: True)  # the daemon wraps its providers before any cycle
    assert Daemon(engine, engine.settings, quiet_daemon()).cycle_job() is not None
    assert first.found is None
    again = NotebookCloud(clock)  # a restart: a new process, the same store
    engine = build_engine(db, again, clock)
    fence_engine(engine, lambda: True)
    assert Daemon(engine, engine.settings, quiet_daemon()).cycle_job() is not None
    assert again.found == {"learned": 1}


def test_run_once_logs_json_as_the_daemon_does_when_told_to(tmp_path: Path) -> None:
    """A CronJob's `costguard run --once` with COSTGUARD_LOG_FORMAT=json feeds the daemon's
    log pipeline: every line on stderr is JSON, stage lines included, secrets masked; the
    cycle's summary is stdout's alone."""
    token = "once-json-token-5d2e"
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "idle.yml").write_text(
        (REPO / "policies" / "idle-gpu.yml").read_text())
    env = {**os.environ, "COSTGUARD_DATABASE_URL": f"sqlite:///{tmp_path / 'cg.db'}",
           "COSTGUARD_AGENT_TOKEN": token, "COSTGUARD_LOG_FORMAT": "json",
           "COSTGUARD_PROVIDERS__SIM__INSTANCES": "12"}
    done = subprocess.run([str(Path(sys.executable).parent / "costguard"), "run", "--once",
                           "--format", "json"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "instances" in json.loads(done.stdout)
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert any(ln.get("stage") == "act" for ln in lines), lines
    assert token not in done.stderr
    bad = subprocess.run([str(Path(sys.executable).parent / "costguard"), "run", "--once"],
                         cwd=tmp_path, env={**env, "COSTGUARD_LOG_FORMAT": "yaml"},
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "COSTGUARD_LOG_FORMAT='yaml'" in bad.stderr, bad.stderr
