"""Policy texts the provider tests of both clouds run an engine's cycle with, and that cycle."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from sqlmodel import select

from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.model import GpuMinute
from costguard.policy.load import parse_policy_text
from costguard.providers.base import Provider
from costguard.store.db import Database
from costguard.store.readings import read_minutes, write_minutes
from costguard.store.tables import FindingRow

# a policy that only notifies: an engine's cycle over a fake cloud without acting
IDLE_NOTIFY_POLICY = """\
policies:
  - name: idle-gpu
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 30m}
    actions: [{notify: {to: owner}}]
"""


# the same, counting only what costguard's agent measured as idle evidence
AGENT_EVIDENCE_POLICY = IDLE_NOTIFY_POLICY.replace(
    "idle: {below: 5, for: 30m}", "idle: {below: 5, for: 30m, evidence: agent}")
assert AGENT_EVIDENCE_POLICY != IDLE_NOTIFY_POLICY


def idle_cycle(name: str, provider: Provider, clock: ManualClock, tmp_path: Path, busy: str,
               *, policy: str = IDLE_NOTIFY_POLICY, agent: Sequence[GpuMinute] = ()
               ) -> tuple[set[str], list[GpuMinute]]:
    """One engine cycle of `provider` (as `name`) under `policy` (IDLE_NOTIFY_POLICY), with
    `agent`'s readings stored first (what agents pushed): the instances it found idle, and
    the half hour of `busy`'s readings it stored."""
    now = clock.now().replace(second=0, microsecond=0)
    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    engine = Engine(Settings(database_url=db.url, policy_paths=[],
                             alerts=AlertsSettings(console=False)),
                    db, {name: provider}, parse_policy_text(policy, "p.yml"), clock)
    try:
        if agent:
            with db.session() as s:
                write_minutes(s, agent)
        engine.run_cycle()
        with db.session() as s:
            found = {r.instance_id for r in s.exec(select(FindingRow))}
            stored = read_minutes(s, [(name, busy)], now - timedelta(minutes=30), now)
    finally:
        db.dispose()
    return found, stored[(name, busy)]
