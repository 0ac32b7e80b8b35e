"""One costguard replica as its own process, over the shared simulated cloud.

    python -m tests.reliability.replica daemon STATE_FILE    # what `costguard run` does
    python -m tests.reliability.replica cycles STATE_FILE N  # N cycles on a shared clock

Settings come from the environment and costguard.yaml, exactly as for `costguard run`;
the only difference is the provider: the seeded sim fleet with its states in STATE_FILE.
`CG_KILL_AT=after-intent:3` SIGKILLs the process at the third time the act stage reaches
that point (the engine's fault hook), the way a node dies in the middle of a stop;
`CG_PAUSE_AT=...` SIGSTOPs it there instead (a frozen VM, a long GC pause).
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from costguard.actions.runner import FaultHook
from costguard.clock import Clock, ManualClock, SystemClock
from costguard.config import load_settings
from costguard.engine import Engine
from costguard.policy.load import load_policy_set
from costguard.providers.sim import SimProvider
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


def main(argv: list[str]) -> int:
    mode, state = argv[0], SharedState(Path(argv[1]))
    if mode == "cycles":
        run_cycles(state, int(argv[2]))
        return 0
    from costguard.daemon.scheduler import run_forever

    engine = build(state, SystemClock())
    run_forever(engine, engine.settings)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
