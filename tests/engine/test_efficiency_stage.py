"""The cycle's efficiency stage keeps in memory only the verdicts an `underused:` condition
reads (each is ~3.6 KB; a fleet's are hundreds of MB), and the weekly digest reads them once
per slot."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from costguard.clock import ManualClock
from costguard.engine import Engine
from costguard.recommend import stored
from tests.engine.conftest import IDLE_POLICY, EngineFactory
from tests.fakes.cloud import ScriptedCloud

UNDERUSED = """\
  - name: underused
    mode: dry-run
    filters: {gpu: true}
    condition:
      underused: {window: 7d, min_monthly_savings_usd: 0}
    actions:
      - notify: {to: owner}
"""


def _fleet(cloud: ScriptedCloud) -> None:
    for n in range(3):
        cloud.add(f"i-{n}", gpus=2)


def _idle_only(make_engine: EngineFactory, cloud: ScriptedCloud,
               monkeypatch: pytest.MonkeyPatch) -> tuple[Engine, list[object]]:
    """An engine over three GPU instances with the idle policy alone, and its verdict reads."""
    _fleet(cloud)
    loads = _counting_loads(monkeypatch)
    return make_engine(IDLE_POLICY.format(mode="enforce", cap=10)), loads


def _counting_loads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """A list that grows by one each time the cycle reads verdicts back."""
    loads: list[object] = []
    real = stored.load

    def load(session: Any, cfg: Any, now: Any) -> Any:
        loads.append(cfg)
        return real(session, cfg, now)

    monkeypatch.setattr(stored, "load", load)
    return loads


def test_without_an_underused_condition_no_verdict_is_held(
        make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    engine, loads = _idle_only(make_engine, cloud, monkeypatch)
    summary = engine.run_cycle()  # Monday 08:00: no digest due
    assert loads == [] and engine.verdicts.held == {}
    assert summary.judged == 3  # judged and stored all the same
    with engine.db.session() as s:
        assert len(stored.load(s, engine.settings.recommend, clock.now())) == 3


def test_an_underused_condition_holds_its_verdicts(
        make_engine: EngineFactory, cloud: ScriptedCloud) -> None:
    _fleet(cloud)
    engine = make_engine(IDLE_POLICY.format(mode="enforce", cap=10) + UNDERUSED)
    assert engine.run_cycle().judged == 3
    (held,) = engine.verdicts.held.values()
    assert sorted(ref[1] for ref in held) == ["i-0", "i-1", "i-2"]


def test_the_digest_reads_the_verdicts_once_in_its_slot(
        make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    engine, loads = _idle_only(make_engine, cloud, monkeypatch)
    engine.run_cycle()  # 08:00
    assert loads == []
    clock.advance(timedelta(hours=1))  # Monday 09:00: the digest's slot
    engine.run_cycle()
    assert len(loads) == 1
    for _ in range(3):  # the rest of its day: already enqueued from here
        clock.advance(timedelta(minutes=5))
        engine.run_cycle()
    assert len(loads) == 1
    clock.advance(timedelta(days=7))  # next Monday
    engine.run_cycle()
    assert len(loads) == 2
