"""The test/bench fleet is the c7n peer's fleet, draw for draw."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.aws_fleet import DEFAULT_REGIONS, DEFAULT_SEED, expectations, plan_fleet

PEER = Path(__file__).resolve().parents[4] / "shared" / "peers" / "c7n" / "fleet.py"


def _peer_module() -> Any:
    spec = importlib.util.spec_from_file_location("c7n_peer_fleet", PEER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not PEER.exists(), reason="shared/peers/c7n/fleet.py is not beside the repo")
@pytest.mark.parametrize("n", [200, 1000])
def test_plan_is_identical_to_the_peer_harness(n: int) -> None:
    ours = plan_fleet(n, DEFAULT_REGIONS, DEFAULT_SEED)
    theirs = _peer_module().plan_fleet(n, DEFAULT_REGIONS, DEFAULT_SEED)

    assert ours == theirs


def test_expectation_counts_match_the_numbers_published_for_the_peer() -> None:
    # NOTES.md at seed 20240611, N=1000: missing team 153, idle-GPU stop 111, on-demand GPU 269.
    specs = plan_fleet(1000, DEFAULT_REGIONS, DEFAULT_SEED)
    for n, s in enumerate(specs):
        s["id"] = f"i-{n:017x}"

    doc = expectations(specs, DEFAULT_REGIONS, now=datetime(2026, 1, 1, tzinfo=UTC))

    totals = {
        k: sum(c[k] for c in doc["counts"].values())
        for k in ("missing_team", "idle_gpu_stop", "ondemand_gpu_running")
    }
    assert totals == {"missing_team": 153, "idle_gpu_stop": 111, "ondemand_gpu_running": 269}
