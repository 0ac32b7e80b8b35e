"""Each kind of resource is read and held as far back as its own idle policies look: one
kind's longer window (notebooks', 2 hours) does not hold every instance's readings that long
(at 10,000 simulated instances it doubled the daemon's memory and its first cycle)."""

from __future__ import annotations

from datetime import timedelta

from sqlmodel import select

from costguard.clock import ManualClock
from costguard.model import InstanceKind
from costguard.store.db import Database
from costguard.store.tables import PolicyStateRow
from tests.engine.conftest import EngineFactory, record_metric_calls, run_for
from tests.fakes.cloud import ScriptedCloud, always

POLICIES = """\
policies:
  - name: idle-gpu
    mode: enforce
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 2h}
  - name: idle-notebooks
    resource: notebook
    mode: enforce
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 2h}
    actions:
      - notify: {to: owner}
      - stop: {grace: 2h}
"""


def _fleet(cloud: ScriptedCloud) -> None:
    cloud.add("i-vm", always("no_process"))
    cloud.add("nb-1", always("no_process"), kind=InstanceKind.NOTEBOOK)


def test_a_first_cycle_reads_each_kind_over_its_own_window(
        make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock) -> None:
    _fleet(cloud)
    calls = record_metric_calls(cloud)
    now = clock.now()
    make_engine(POLICIES).run_cycle()
    older = sorted((ids, start) for ids, start, _ in calls
                   if start < now - timedelta(minutes=15))
    # the VM as far back as an hour (the least a first cycle reads), the notebook two
    assert older == [(["i-vm"], now - timedelta(hours=1)),
                     (["nb-1"], now - timedelta(hours=2))]


def test_the_window_holds_each_instance_as_far_back_as_its_kind_looks(
        make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock,
        db: Database) -> None:
    _fleet(cloud)
    engine = make_engine(POLICIES)
    run_for(engine, clock, timedelta(hours=2, minutes=30))
    now = clock.now() - timedelta(minutes=5)  # the last cycle's
    held = {iid: min(m.minute for m in engine.window.minutes(
        ("sim", iid), now - timedelta(hours=6), now)) for iid in ("i-vm", "nb-1")}
    # the notebook's whole two hours; the VM its 45 minutes (what has left them goes a
    # little after, `store.window._SLACK`), not the notebooks' two hours
    assert held["nb-1"] <= now - timedelta(hours=2)
    assert now - timedelta(hours=1) <= held["i-vm"] <= now - timedelta(minutes=45)
    # and each is judged idle over its own window
    with db.session() as s:
        warned = sorted((st.instance_id, st.policy) for st in s.exec(select(PolicyStateRow))
                        if st.state in ("warned", "acted"))
    assert warned == [("i-vm", "idle-gpu"), ("nb-1", "idle-notebooks")]
