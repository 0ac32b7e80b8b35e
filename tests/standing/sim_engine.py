"""The engine on the simulated cloud's standing resources, for the standing tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.demo.sim import SimProvider
from costguard.demo.sim_settings import SimSettings
from costguard.engine import Engine
from costguard.policy.schema import PolicySet
from costguard.store.db import Database

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
STEP = timedelta(minutes=30)


def sim_engine(tmp_path: Path, policies: PolicySet, instances: int = 2
               ) -> tuple[Engine, SimProvider, ManualClock]:
    """An engine over a simulated cloud holding its seeded volumes, snapshots, address and
    reservation, from T0."""
    clock = ManualClock(T0)
    sim = SimProvider(SimSettings(instances=instances, launches_per_day=0, standing=True),
                      clock)
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}")
    return Engine(settings, Database(settings.database_url), {"sim": sim}, policies,
                  clock), sim, clock


def run_for(engine: Engine, clock: ManualClock, hours: float) -> None:
    """Cycles every STEP for `hours`."""
    end = clock.now() + timedelta(hours=hours)
    while clock.now() < end:
        engine.run_cycle()
        clock.advance(STEP)


def enforced(policies: PolicySet) -> PolicySet:
    return policies.model_copy(update={"policies": tuple(
        p.model_copy(update={"mode": "enforce"}) for p in policies.policies)})
