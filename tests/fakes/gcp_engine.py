"""An engine over the real GCP provider and the local GCP fakes, with one policy file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.engine import Engine
from costguard.policy.load import load_policy_set
from costguard.providers.gcp import GcpProvider
from costguard.store.db import Database


def gcp_engine(fake: FakeGcp, folder: Path, policy: str, clock: ManualClock,
               projects: list[str]) -> tuple[Engine, Database, GcpProvider]:
    """The engine (SQLite in `folder`, console alerts off), its database and provider (to
    dispose and close)."""
    (folder / "p.yml").write_text(policy)
    url = f"sqlite:///{folder / 'cg.db'}"
    settings = Settings(database_url=url, policy_paths=[folder / "p.yml"],
                        alerts=AlertsSettings(console=False))
    db = Database(url)
    fake.compute.now = clock.now  # a VM the engine starts started at the engine's time
    provider = GcpProvider(fake.settings(projects=projects), clock=clock)
    engine = Engine(settings, db, {"gcp": provider}, load_policy_set([folder / "p.yml"]), clock)
    return engine, db, provider


@contextmanager
def gcp_engine_over(fake: FakeGcp, folder: Path, policy: str, clock: ManualClock,
                    projects: tuple[str, ...] = ("ml-prod",)) -> Iterator[Engine]:
    """`gcp_engine`'s engine, its provider closed and database disposed after."""
    engine, db, provider = gcp_engine(fake, folder, policy, clock, list(projects))
    try:
        yield engine
    finally:
        provider.close()
        db.dispose()
