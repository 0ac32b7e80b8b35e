"""One costguard replica as its own process, over the shared simulated cloud.

    python -m tests.reliability.replica daemon STATE_FILE    # what `costguard run` does
    python -m tests.reliability.replica cycles STATE_FILE N  # N cycles on a shared clock

Settings come from the environment and costguard.yaml, exactly as for `costguard run`;
the only difference is the provider: the seeded sim fleet with its states in STATE_FILE.
`CG_KILL_AT=after-intent:3` SIGKILLs the process at the third time the act stage reaches
that point (the engine's fault hook), the way a node dies in the middle of a stop;
`CG_PAUSE_AT=...` SIGSTOPs it there instead (a frozen VM, a long GC pause).
`CG_GATE=PATH` makes the process wait, its imports done, until PATH exists: a test starts
the interpreter early (imports are most of a start-up) and lets it go when the scenario
needs it, so the wait for it is short and predictable.

    python -m tests.reliability.replica forks STATE_FILE     # one import, many processes

reads `N KILL_SPEC LOG` lines on stdin; for each it forks a child that runs N cycles like
`cycles` (with `CG_KILL_AT=KILL_SPEC` unless it is `-`, its output in LOG), waits for it and
answers the child's exit status as `subprocess` reports it (-9: SIGKILLed). Each child is a
process of its own, opening its own database connections after the fork; only the imports
are shared.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from costguard.actions.runner import FaultHook
from costguard.clock import Clock, ManualClock, SystemClock
from costguard.config import load_settings
from costguard.demo.sim import SimProvider
from costguard.engine import Engine
from costguard.policy.load import load_policy_set
from costguard.store.db import Database
from tests.reliability.shared_cloud import SharedSimCloud, SharedState

CLOCK_START = datetime(2026, 11, 21, 22, 0, tzinfo=UTC)


def kill_hook() -> FaultHook | None:
    """CG_KILL_AT dies there; CG_PAUSE_AT freezes there (SIGSTOP) until a SIGCONT."""
    spec = os.environ.get("CG_KILL_AT") or os.environ.get("CG_PAUSE_AT")
    if not spec:
        return None
    sig = signal.SIGKILL if os.environ.get("CG_KILL_AT") else signal.SIGSTOP
    point, _, nth = spec.partition(":")
    seen = [0]

    def hook(at: str) -> None:
        if at == point:
            seen[0] += 1
            if seen[0] == int(nth or 1):
                os.kill(os.getpid(), sig)
    return hook


def build(state: SharedState, clock: Clock) -> Engine:
    settings = load_settings()
    assert settings.providers.sim is not None
    cloud = SharedSimCloud(SimProvider(settings.providers.sim, clock), state, clock)
    db = Database(settings.database_url)
    return Engine(settings, db, {"sim": cloud}, load_policy_set(settings.policy_paths), clock,
                  fault=kill_hook())


def run_cycles(state: SharedState, count: int) -> None:
    """Cycles back to back on a manual clock kept in the state file (it survives kills)."""
    with state.locked() as st:
        clock = ManualClock(datetime.fromisoformat(st.get("clock", CLOCK_START.isoformat())))
    engine = build(state, clock)
    for _ in range(count):
        with state.locked() as st:
            st["clock"] = clock.advance(timedelta(minutes=1)).isoformat()
        engine.run_cycle()


def _forked_cycles(state: SharedState, count: int, kill_at: str, log: str) -> int:
    """Run `count` cycles in a forked child; its exit status as Popen.returncode gives it."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into the parent's loop
        code = 1
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.environ.pop("CG_KILL_AT", None)
            if kill_at != "-":
                os.environ["CG_KILL_AT"] = kill_at
            run_cycles(state, count)
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def serve_forks(state: SharedState) -> None:
    for line in sys.stdin:
        count, kill_at, log = line.split()
        print(_forked_cycles(state, int(count), kill_at, log), flush=True)


def wait_for_gate() -> None:
    gate = os.environ.get("CG_GATE")
    while gate and not Path(gate).exists():
        time.sleep(0.02)


def main(argv: list[str]) -> int:
    mode, state = argv[0], SharedState(Path(argv[1]))
    if mode == "forks":
        serve_forks(state)
        return 0
    if mode == "cycles":
        wait_for_gate()
        run_cycles(state, int(argv[2]))
        return 0
    from costguard.daemon.scheduler import run_forever

    wait_for_gate()
    engine = build(state, SystemClock())
    run_forever(engine, engine.settings)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
