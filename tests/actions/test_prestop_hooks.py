"""Pre-stop hooks end to end: the daemon's engine and ingest over loopback HTTP, a real
agent on the same manual clock, and a real "trainer" process that catches SIGUSR1 to write a
checkpoint. A hook that succeeds, one that fails, one that hangs past its timeout, an agent
that dies mid-hook, and a daemon that crashes between the hook and the stop: the stop happens
or not exactly as the policy says, once, and the journal holds the hook's outcome."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.sink import StoreHooks, StoreSink
from costguard.engine import Engine
from costguard.model import InstanceState
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, PolicyStateRow, StopHookRow
from costguard.telemetry.agent import Agent, AgentSettings
from costguard.telemetry.identity import Identity
from costguard.telemetry.ingest import telemetry_app
from costguard.telemetry.trace import NvmlSample, ProcessMemory
from tests.fakes.cloud import DARK, T0, ScriptedCloud
from tests.fakes.loopback import serve
from tests.telemetry.agent_helpers import RecordedSampler

# real time: hooks run real processes, a hanging one for its whole timeout (~50 s in all on
# SQLite); left out of mutation runs, which still see the act stage's other scenarios
pytestmark = pytest.mark.slow

TOKEN = "hook-test-token"
TRAINER = """
import signal, sys, time
path = sys.argv[1]
def checkpoint(signum, frame):
    with open(path, "a") as f:
        f.write("checkpoint\\n")
    sys.exit(0)
signal.signal(signal.SIGUSR1, checkpoint)
open(path + ".ready", "w").close()
while True:
    time.sleep(0.1)
"""
POLICY = """\
policies:
  - name: idle-training
    mode: enforce
    filters: {{gpu: true, state: running}}
    condition:
      idle: {{below: 5, for: 45m}}
    actions:
      - notify: {{to: owner}}
      - stop:
          grace: 15m
          pre_stop: {hook}
"""


class TrainerSampler(RecordedSampler):
    """The recording's held-memory-idle GPU, held by the test's trainer process."""

    def __init__(self, clock: ManualClock, pid: int) -> None:
        super().__init__(clock, 1, lambda gpu, now: "held_memory_idle")
        self.pid = pid

    def sample(self) -> list[NvmlSample]:
        return [replace(s, processes=tuple(ProcessMemory(self.pid, p.used_bytes)
                                           for p in (s.processes or ())))
                for s in super().sample()]


@dataclass
class Rig:
    clock: ManualClock
    cloud: ScriptedCloud
    engine: Engine
    agent: Agent
    trainer: subprocess.Popen[bytes]
    checkpoint: Path
    db: Database

    def minutes(self, n: int, *, cycle_every: int = 5, agent: bool = True,
                join: bool = True) -> None:
        """`n` minutes: the agent ticks every second, the engine runs every 5 minutes."""
        for _ in range(n):
            if self.clock.now().minute % cycle_every == 0:
                self.engine.run_cycle()
            for _ in range(60):
                if agent:
                    self.agent.tick()
                self.clock.advance(timedelta(seconds=1))
            if agent and join:
                self.agent.hooks.join(30)  # a hook runs in real time, in its thread

    def until(self, done, most: int = 120, join: bool = True) -> None:  # type: ignore[no-untyped-def]
        """Minute by minute until `done()` (at most `most` minutes)."""
        for _ in range(most):
            if done():
                return
            self.minutes(1, join=join)
        raise AssertionError(f"not done after {most} minutes")

    def journal(self, action: str) -> list[ActionJournalRow]:
        with self.db.session() as s:
            return list(s.exec(select(ActionJournalRow).where(
                ActionJournalRow.action == action).order_by(ActionJournalRow.id)))  # type: ignore[arg-type]

    def hooks(self) -> list[StopHookRow]:
        with self.db.session() as s:
            return list(s.exec(select(StopHookRow)))

    def checkpoints(self) -> int:
        return (self.checkpoint.read_text().count("checkpoint")
                if self.checkpoint.exists() else 0)


@pytest.fixture
def rig_for(db: Database, db_url: str, tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    made: list[tuple[subprocess.Popen[bytes], httpx.Client]] = []
    servers = []

    def build(hook: str, *, command: str | None = None, mode: str = "enforce") -> Rig:
        clock = ManualClock(T0)
        cloud = ScriptedCloud(clock)
        cloud.add("i-train", DARK)  # no cloud metrics: the agent's readings only
        checkpoint = tmp_path / "checkpoint.txt"
        trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(checkpoint)])
        deadline = time.monotonic() + 10
        while not Path(f"{checkpoint}.ready").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        app = telemetry_app(token=TOKEN, sink=StoreSink(db, DaemonMetrics()),
                            clock=clock.now, hooks=StoreHooks(db))
        server = serve(app)
        url = server.__enter__()
        servers.append(server)
        client = httpx.Client(timeout=10)
        made.append((trainer, client))
        agent = Agent(AgentSettings(url=url, token=TOKEN, buffer_path=tmp_path / "buffer.db",
                                    pre_stop_command=command),
                      TrainerSampler(clock, trainer.pid), Identity("sim", "i-train"),
                      client=client, clock=clock,
                      sleep=lambda s: clock.advance(timedelta(seconds=s)))
        settings = Settings(database_url=db_url, policy_paths=[])
        engine = Engine(settings, db, {"sim": cloud},
                        parse_policy_text(POLICY.format(hook=hook).replace(
                            "mode: enforce", f"mode: {mode}"), "test.yml"), clock)
        return Rig(clock, cloud, engine, agent, trainer, checkpoint, db)

    yield build
    for trainer, client in made:
        trainer.kill()
        trainer.wait()
        client.close()
    for server in servers:
        server.__exit__(None, None, None)


def test_a_signal_hook_checkpoints_then_the_stop_happens_once(rig_for) -> None:  # type: ignore[no-untyped-def]
    rig = rig_for("{signal: SIGUSR1, timeout: 30s}")
    rig.until(rig.hooks)  # idle, warned, 15 min grace: the stop is due, the hook asked
    assert rig.cloud.instances["i-train"].state is InstanceState.RUNNING
    [hook] = rig.hooks()
    assert hook.kind == "signal" and hook.signal == "SIGUSR1"
    rig.minutes(10)
    assert rig.checkpoints() == 1  # the trainer wrote its checkpoint, once
    assert rig.trainer.wait(10) == 0
    assert rig.cloud.instances["i-train"].state is InstanceState.STOPPED
    assert rig.cloud.calls["stop"] == 1
    [pre] = rig.journal("pre_stop")
    assert pre.status == "done"
    assert f"SIGUSR1 to pid {rig.trainer.pid}; all exited after" in pre.detail
    [stop] = rig.journal("stop")
    assert stop.status == "done"
    assert "pre-stop hook (SIGUSR1 to the GPUs' processes, 30 s to checkpoint) succeeded" in (
        stop.detail)
    assert rig.hooks()[0].status == "succeeded"


def test_a_failed_command_holds_the_stop_back(rig_for) -> None:  # type: ignore[no-untyped-def]
    rig = rig_for("{host_command: true, timeout: 30s, on_failure: hold}",
                  command="echo 'disk full' >&2; exit 3")
    rig.minutes(80)
    assert rig.cloud.calls["stop"] == 0
    [pre] = rig.journal("pre_stop")
    assert pre.status == "held"
    assert "failed: exit 3 after 0 s: disk full; the stop is held back (on_failure: hold)" in (
        pre.detail)
    assert rig.journal("stop") == []
    with rig.db.session() as s:
        states = {st.state for st in s.exec(select(PolicyStateRow))}
    # cleared, then (the GPU still idle) a new episode warns again: never stopped
    assert states & {"cleared", "warned", "seen"}


def test_a_hanging_command_is_killed_at_its_timeout_and_the_policy_decides(  # type: ignore[no-untyped-def]
        rig_for, tmp_path: Path) -> None:
    marker = tmp_path / "still-running"
    rig = rig_for("{host_command: true, timeout: 10s, on_timeout: stop}",
                  command=f"sleep 120; touch {marker}")
    started = time.monotonic()
    rig.minutes(75)
    assert time.monotonic() - started < 100  # killed at 10 s, not left for 120
    [pre] = rig.journal("pre_stop")
    assert pre.status == "timed_out"
    assert "still running after 10 s: killed" in pre.detail
    assert rig.cloud.calls["stop"] == 1  # on_timeout: stop
    time.sleep(0.2)
    assert not marker.exists()  # its whole process group was killed


def test_an_agent_that_dies_mid_hook_times_out_and_never_runs_it_twice(  # type: ignore[no-untyped-def]
        rig_for, tmp_path: Path) -> None:
    from costguard.telemetry.buffer import DiskBuffer
    from costguard.telemetry.hooks import HookRunner, HookSpec

    rig = rig_for("{host_command: true, timeout: 30s}", command="sleep 8")
    # the cycle asks for the hook; the agent fetches it with its next push and starts it...
    rig.until(rig.hooks, join=False)
    [hook] = rig.hooks()
    assert hook.status == "delivered"
    assert rig.agent.buffer.hook_result(hook.id) == ("running", "")
    # ... and dies. Restarted on its buffer, the interrupted hook is failed, not run again
    buffer = DiskBuffer(tmp_path / "buffer.db")
    runner = HookRunner(buffer, command="touch ran-again", gpu_pids=set)
    assert buffer.hook_result(hook.id) == (
        "failed", "the agent stopped while this hook ran; not run again")
    assert runner.submit(HookSpec(hook.id, "command", None, 10.0)) is False
    buffer.close()
    rig.agent.hooks.join(30)  # (the dead agent's thread, here still finishing: it changes nothing)
    assert rig.agent.buffer.hook_result(hook.id)[0] == "failed"
    # the daemon hears nothing more from the agent (the cloud's metrics still show the GPU
    # idle): at the hook's deadline (30 s + 5 min) it times out
    rig.cloud.phases["i-train"] = lambda minute: "held_memory_idle"
    rig.minutes(30, agent=False)
    pre = rig.journal("pre_stop")[0]  # (a later episode asks again, and times out again)
    assert pre.status == "held"
    assert "the agent did not report by" in pre.detail
    assert "(it fetched the hook, then went silent)" in pre.detail
    assert "the stop is held back (on_timeout: hold)" in pre.detail
    assert rig.cloud.calls["stop"] == 0  # on_timeout: hold (the default)


def test_a_daemon_crash_between_the_hook_and_the_stop_neither_skips_nor_repeats_it(rig_for) -> None:  # type: ignore[no-untyped-def]
    rig = rig_for("{signal: SIGUSR1, timeout: 30s}")
    rig.until(rig.checkpoints)  # the hook is asked and delivered; the trainer checkpoints
    assert rig.cloud.calls["stop"] == 0
    crashes = []

    def crash(point: str) -> None:
        if point == "after-intent" and not crashes:
            crashes.append(point)
            raise SystemExit("killed between the hook and the stop")

    rig.engine.runner.fault = crash
    with pytest.raises(SystemExit):
        rig.minutes(5)
    rig.engine.runner.fault = lambda point: None
    rig.minutes(15)
    assert rig.checkpoints() == 1  # the hook ran once
    assert rig.cloud.calls["stop"] == 1  # and the stop happened once
    assert [j.status for j in rig.journal("pre_stop")] == ["done"]
    assert len(rig.hooks()) == 1


def test_a_host_without_an_agent_skips_the_hook_and_the_journal_says_so(rig_for) -> None:  # type: ignore[no-untyped-def]
    rig = rig_for("{signal: SIGUSR1, timeout: 30s}")
    rig.cloud.phases["i-train"] = lambda minute: "held_memory_idle"  # the cloud's metrics
    rig.minutes(70, agent=False)
    assert rig.cloud.calls["stop"] == 1
    [pre] = rig.journal("pre_stop")
    assert pre.status == "skipped"
    assert "no agent reports from this host" in pre.detail
    assert rig.checkpoints() == 0


def test_a_dry_run_policy_never_runs_a_hook(rig_for) -> None:  # type: ignore[no-untyped-def]
    rig = rig_for("{signal: SIGUSR1, timeout: 30s}", mode="dry-run")
    rig.minutes(75)
    assert rig.hooks() == [] and rig.checkpoints() == 0
    [stop] = rig.journal("stop")
    assert stop.status == "dry-run"
    [pre] = rig.journal("pre_stop")
    assert (pre.status, pre.dry_run) == ("dry-run", True)
    assert pre.detail.startswith("would run the pre-stop hook (SIGUSR1 to the GPUs' processes")
