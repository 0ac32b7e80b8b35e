"""SIGKILL at random points of a cycle, over many process lifetimes: no stop doubled or lost.

Each process runs cycles back to back on a shared manual clock (kept in the cloud's state
file, so time goes on across deaths). It is killed either by the engine's fault hook, at a
random occurrence of `after-intent` (journaled, cloud not called) or `after-call` (cloud
called, result not journaled), or by the test at a random moment, wherever it is: importing,
migrating, collecting, writing a transaction. The hook-killed processes and the final clean
one are forked from one interpreter that did the imports once (`ForkServer`); the ones killed
at a random moment start from scratch, so a kill can land in the imports too.
"""

from __future__ import annotations

import random
import signal
import time
from datetime import datetime
from pathlib import Path

from sqlmodel import select

from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, CycleRow, PolicyStateRow
from tests.daemon.daemon_helpers import stop_journal
from tests.reliability import figures
from tests.reliability.replicas import ForkServer, start_replica, write_config
from tests.reliability.shared_cloud import SharedState

ITERATIONS = 9


def test_sigkill_at_random_points_never_doubles_or_loses_a_stop(tmp_path: Path) -> None:
    rng = random.Random(20261123)
    root = write_config(tmp_path, instances=90, grace="2m")
    state = SharedState(tmp_path / "cloud.json")
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    with state.locked() as st:
        st["restart_after_minutes"] = 3  # owners restart stopped boxes: new episodes, new stops
    injected = {"after-intent": 0, "after-call": 0, "random-time": 0}
    forks = ForkServer(root, url, state.path)
    try:
        for i in range(ITERATIONS):
            if i % 3 == 2:
                replica = start_replica(root, url, state.path, f"run{i}", mode="cycles",
                                        cycles=60)
                time.sleep(rng.uniform(0.3, 4.0))
                if replica.proc.poll() is None:
                    replica.proc.kill()
                    injected["random-time"] += 1
                replica.proc.wait(timeout=30)
                continue
            point = rng.choice(["after-intent", "after-call"])
            code, log = forks.run(f"run{i}", 6, f"{point}:{rng.randint(1, 2)}")
            assert code in (0, -signal.SIGKILL), log.read_text()[-3000:]
            if code == -signal.SIGKILL:
                injected[point] += 1
        # a clean run finds whatever the dead left behind and finishes it
        code, log = forks.run("final", 4)
        assert code == 0, log.read_text()[-3000:]
    finally:
        forks.close()

    db = Database(url)
    journal = stop_journal(db)
    cloud = state.read()
    for key, statuses in journal.items():
        assert statuses.count("done") == 1, f"{key}: {statuses}"
    with db.session() as s:
        assert s.exec(select(ActionJournalRow).where(ActionJournalRow.status == "intent")
                      ).first() is None
        now = datetime.fromisoformat(cloud["clock"])
        overdue = [st.instance_id for st in s.exec(select(PolicyStateRow).where(
            PolicyStateRow.state == "warned")) if st.deadline and st.deadline < now]
        assert not overdue, f"due stops never carried out: {overdue}"
        # a killed process's cycle is closed by the next one: none stays "running"
        statuses = [c.status for c in s.exec(select(CycleRow))]
    running, abandoned = statuses.count("running"), statuses.count("abandoned")
    figures.count("crashes: cycles left running after the kills", running == 0)
    assert running == 0 and abandoned > 0, (running, abandoned)
    # every real stop in the cloud has exactly one done journal key (one per idle episode)
    done_per_instance: dict[str, int] = {}
    for key in journal:
        iid = key.split("|")[2]
        done_per_instance[iid] = done_per_instance.get(iid, 0) + 1
    assert cloud["stops"] == done_per_instance
    assert max(cloud["stops"].values()) > 1  # episodes recurred: kills met stops throughout
    total = sum(injected.values())
    assert injected["after-intent"] and injected["after-call"] and injected["random-time"]
    print(f"SIGKILL faults injected: {total} {injected}; survived: {total}; "
          f"{sum(cloud['stops'].values())} stops, each exactly once")
    db.dispose()
