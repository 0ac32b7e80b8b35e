"""Through the engine: Cloud TPU nodes judged idle on their chips' own Cloud Monitoring
series and acted on with the usual safety. An idle single-host node is stopped through the
TPU API and journaled; a protected one, a busy one and one with no readings are left
running; an idle multi-host slice is journaled as skipped (one unit, never stopped in part);
and their spend accrues at the chip-hour rate."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.engine import Engine
from costguard.policy.load import load_policy_set
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.tpu_metrics import IDLE
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, CostIntervalRow

P, Z = "ml-prod", "us-central1-a"
POLICY = """\
policies:
  - name: idle-tpu-stop
    filters: {gpu: true, state: running, tags: {absent: ["costguard:protect"]}}
    condition:
      idle: {signal: auto, below: 5, for: 1h, min_coverage: 0.8, missing_data: not-idle}
    actions: [notify, {stop: {grace: 0m}}]
    mode: enforce
"""


def _chips(fake: FakeGcp, clock: ManualClock, node: str, chips: int, idle: bool,
           hosts: int = 1) -> None:
    now = clock.now()
    minutes = [now - timedelta(minutes=75 - m, seconds=-30) for m in range(75)]
    for worker in range(hosts):
        for chip in range(chips // hosts):
            points = [(t, 7200 + 60 * i if idle else 0) for i, t in enumerate(minutes)]
            fake.monitoring.add_tpu_series(P, IDLE, node, points, zone=Z, worker=worker,
                                           chip=chip, integer=True)


@pytest.fixture
def run(fake: FakeGcp, clock: ManualClock, tmp_path: Path) -> Iterator[tuple[Engine, Database]]:
    compute = fake.compute
    compute.add_tpu_node(P, Z, "idle-v5e", "v5litepod-8", labels={"team": "nlp"})
    compute.add_tpu_node(P, Z, "kept-v5e", "v5litepod-4",
                         labels={"team": "nlp", "costguard_protect": "true"})
    compute.add_tpu_node(P, Z, "busy-v6e", "v6e-4", labels={"team": "vision"})
    compute.add_tpu_node(P, Z, "unread-v5e", "v5litepod-1", labels={"team": "nlp"})
    compute.add_tpu_node(P, Z, "idle-slice", "v5litepod-16", hosts=4, labels={"team": "nlp"})
    _chips(fake, clock, "idle-v5e", 8, idle=True)
    _chips(fake, clock, "kept-v5e", 4, idle=True)
    _chips(fake, clock, "busy-v6e", 4, idle=False)
    _chips(fake, clock, "idle-slice", 16, idle=True, hosts=4)
    (tmp_path / "p.yml").write_text(POLICY)
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    settings = Settings(database_url=url, policy_paths=[tmp_path / "p.yml"],
                        alerts=AlertsSettings(console=False))
    db = Database(url)
    provider = GcpProvider(fake.settings(projects=[P]), clock=clock)
    yield Engine(settings, db, {"gcp": provider}, load_policy_set([tmp_path / "p.yml"]),
                 clock), db
    provider.close()
    db.dispose()


def test_idle_tpu_nodes_are_stopped_as_idle_gpus_are(
        fake: FakeGcp, clock: ManualClock, run: tuple[Engine, Database]) -> None:
    engine, db = run
    engine.run_cycle()
    clock.advance(timedelta(minutes=5))
    engine.run_cycle()
    state = {name: fake.compute.tpu_node(P, Z, name).state
             for name in ("idle-v5e", "kept-v5e", "busy-v6e", "unread-v5e", "idle-slice")}
    assert state == {"idle-v5e": "STOPPED", "kept-v5e": "READY", "busy-v6e": "READY",
                     "unread-v5e": "READY", "idle-slice": "READY"}
    assert fake.compute.calls["POST tpu_stop"] == 1
    with db.session() as s:
        journal = s.exec(select(ActionJournalRow)).all()
        spend = s.exec(select(CostIntervalRow)).all()
    stops = [r for r in journal if r.action == "stop"]
    assert [r.status for r in stops] == ["done"]
    idle_v5e = fake.compute.tpu_node(P, Z, "idle-v5e")
    assert stops[0].instance_id == str(idle_v5e.id)
    slice_id = str(fake.compute.tpu_node(P, Z, "idle-slice").id)
    skipped = [r for r in journal if r.instance_id == slice_id]
    assert skipped and all(r.action == "skip" and r.status == "skipped" for r in skipped)
    assert "multi-host TPU slice" in skipped[0].detail
    # spend at the chip-hour rate (v5e $1.20, v6e $2.70); the node stopped bills nothing
    rates = {r.instance_id: r.usd_per_hour for r in spend}
    node_id = {name: str(fake.compute.tpu_node(P, Z, name).id)
               for name in ("kept-v5e", "busy-v6e", "idle-slice")}
    assert rates == pytest.approx({node_id["kept-v5e"]: 4 * 1.2, node_id["busy-v6e"]: 4 * 2.7,
                                   node_id["idle-slice"]: 16 * 1.2,
                                   str(fake.compute.tpu_node(P, Z, "unread-v5e").id): 1.2})
