"""A crash at any point of an action neither repeats it nor loses its trace.

The fault hook raises at a named point inside the act stage, after the journal intent is
committed; a fresh Engine (a restarted process: nothing kept in memory) then carries on
against the same database and the same cloud.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.model import InstanceState
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow
from tests.engine.conftest import EngineFactory, run_for
from tests.fakes.cloud import ScriptedCloud, always


class Crash(BaseException):
    """Stands for the process dying: not an Exception, so nothing catches it."""


def crash_at(point: str) -> object:
    def hook(at: str) -> None:
        if at == point:
            raise Crash(at)
    return hook


@pytest.mark.parametrize("point", ["after-intent", "after-call"])
def test_crash_mid_action_does_not_repeat_the_stop(
    point: str, make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock,
    db: Database,
) -> None:
    cloud.add("i-idle", always("no_process"))
    doomed = make_engine(fault=crash_at(point))  # type: ignore[arg-type]
    with pytest.raises(Crash):
        run_for(doomed, clock, timedelta(hours=1))
    with db.session() as s:
        pending = list(s.exec(select(ActionJournalRow).where(ActionJournalRow.status == "intent")))
    assert len(pending) == 1  # the intent survived the crash
    calls_before_restart = cloud.calls["stop"]
    assert calls_before_restart == (1 if point == "after-call" else 0)

    clock.advance(timedelta(minutes=5))
    run_for(make_engine(), clock, timedelta(hours=1))  # the restarted daemon

    assert cloud.calls["stop"] == 1  # exactly one stop reached the cloud, in all
    assert cloud.instances["i-idle"].state is InstanceState.STOPPED
    with db.session() as s:
        stops = list(s.exec(select(ActionJournalRow).where(ActionJournalRow.action == "stop")
                            .order_by(ActionJournalRow.id)))  # type: ignore[arg-type]
        actions = list(s.exec(select(AlertRow).where(AlertRow.kind == "action")))
    assert all(j.status != "intent" for j in stops)  # every intent resolved
    assert [j.status for j in stops].count("done") == 1
    if point == "after-intent":
        assert [j.status for j in stops] == ["interrupted", "done"]
    else:
        assert [j.status for j in stops] == ["done"]
        assert "resolved after restart" in stops[0].detail
    assert len(actions) == 1  # the owner hears about the stop once


def test_sigkill_between_intent_and_call_in_a_real_process(tmp_path: Path) -> None:
    """The same guarantee when the process is really killed (os._exit: no cleanup runs)."""
    db_file = tmp_path / "cg.db"
    state = tmp_path / "cloud.json"
    script = textwrap.dedent(f"""
        import json, os, sys
        from datetime import timedelta
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from costguard.clock import ManualClock
        from costguard.config import Settings
        from costguard.engine import Engine
        from costguard.model import InstanceState
        from costguard.policy.load import parse_policy_text
        from costguard.store.db import Database
        from tests.engine.conftest import IDLE_POLICY
        from tests.fakes.cloud import T0, ScriptedCloud, always

        state = Path({str(state)!r})
        saved = json.loads(state.read_text()) if state.exists() else {{"t": 0, "stops": 0,
                                                                       "stopped": False}}
        clock = ManualClock(T0 + timedelta(minutes=saved["t"]))
        cloud = ScriptedCloud(clock)
        cloud.add("i-idle", always("no_process"))
        if saved["stopped"]:
            cloud.instances["i-idle"] = cloud.instances["i-idle"].model_copy(
                update={{"state": InstanceState.STOPPED}})
        def save():
            state.write_text(json.dumps({{"t": saved["t"], "stops": saved["stops"] +
                cloud.calls["stop"], "stopped": cloud.instances["i-idle"].state is
                InstanceState.STOPPED}}))
        def fault(point):
            if point == sys.argv[1]:
                save()
                os._exit(9)
        url = "sqlite:///{db_file}"
        engine = Engine(Settings(database_url=url, policy_paths=[]), Database(url),
                        {{"sim": cloud}}, parse_policy_text(IDLE_POLICY.format(
                            mode="enforce", cap=10)), clock, fault=fault)
        for _ in range(12):
            engine.run_cycle()
            clock.advance(timedelta(minutes=5))
            saved["t"] += 5
        save()
    """)
    first = subprocess.run([sys.executable, "-c", script, "after-intent"], timeout=120)
    assert first.returncode == 9
    second = subprocess.run([sys.executable, "-c", script, "never"], timeout=120)
    assert second.returncode == 0
    import json

    final = json.loads(state.read_text())
    assert final == {"t": final["t"], "stops": 1, "stopped": True}
    db = Database(f"sqlite:///{db_file}")
    with db.session() as s:
        statuses = [j.status for j in s.exec(select(ActionJournalRow).where(
            ActionJournalRow.action == "stop"))]
    assert statuses == ["interrupted", "done"]
