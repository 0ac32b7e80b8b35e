"""The evaluate stage: every policy against every instance it selects."""

from __future__ import annotations

from datetime import timedelta

import pytest

from costguard.clock import ManualClock
from costguard.model import Instance
from tests.engine.conftest import EngineFactory, run_for
from tests.fakes.cloud import IDLE, ScriptedCloud


def test_only_instances_a_policy_selects_are_priced(
        make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A price is a lookup, and for a spot type not read yet a call: an instance no policy
    selects (the idle policy's filters ask for a GPU) is not priced to be judged."""
    cloud.add("gpu-1", IDLE)
    cloud.add("cpu-1", IDLE, gpus=0, itype="m5.large")
    engine = make_engine(mode="dry-run")
    priced: list[str] = []
    inner = engine.price

    def price(inst: Instance) -> float:
        priced.append(inst.instance_id)
        return inner(inst)

    monkeypatch.setattr(engine, "price", price)
    run_for(engine, clock, timedelta(hours=1))
    assert set(priced) == {"gpu-1"}
    summary = engine.run_cycle()
    assert summary.findings == {"idle-gpu": 1}  # the GPU instance's finding, priced
