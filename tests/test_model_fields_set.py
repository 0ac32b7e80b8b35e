"""Models given the same fields share one pydantic fields-set (instances, held verdicts),
and stay independent."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime

from costguard.model import Instance
from costguard.telemetry.efficiency import Efficiency

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def _inst(i: int, **extra: object) -> Instance:
    return Instance.model_validate({
        "provider": "aws", "account": "111122223333", "region": "us-east-1",
        "instance_id": f"i-{i:017x}", "instance_type": "g5.xlarge", "state": "running",
        "gpu_count": 1, "launch_time": NOW, "observed_at": NOW, "tags": {"team": "ml"},
        **extra})


def test_instances_given_the_same_fields_share_one_set() -> None:
    a, b = _inst(1), _inst(2)
    assert a.model_fields_set == b.model_fields_set
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    named = _inst(3, name="trainer")  # another combination: its own set, shared in turn
    assert "name" in named.model_fields_set and "name" not in a.model_fields_set
    assert named.__pydantic_fields_set__ is _inst(4, name="x").__pydantic_fields_set__


def test_a_copy_with_changes_leaves_the_shared_set_alone() -> None:
    a, b = _inst(1), _inst(2)
    before = set(a.model_fields_set)
    c = a.model_copy(update={"name": "renamed", "zone": "us-east-1a"})
    assert {"name", "zone"} <= c.model_fields_set
    assert a.model_fields_set == before == b.model_fields_set
    assert a.model_dump(exclude_unset=True).keys() == before
    assert c.model_dump(exclude_unset=True)["name"] == "renamed"
    # copies with the same fields share one set too (a simulated cloud's or an inventory's)
    d = b.model_copy(update={"name": "other", "zone": "us-east-1b"})
    assert d.__pydantic_fields_set__ is c.__pydantic_fields_set__
    assert a.model_copy(update={"observed_at": NOW}).__pydantic_fields_set__ is (
        a.__pydantic_fields_set__)
    e = d.model_copy(update={"state_reason": "stopped by costguard"})
    assert "state_reason" in e.model_fields_set and "state_reason" not in d.model_fields_set


def test_an_instance_costs_well_under_a_kilobyte_more_than_its_values() -> None:
    _inst(0)
    tracemalloc.start()
    try:
        kept = [_inst(i) for i in range(2_000)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) == 2_000
    # with a set of its own each, an instance took ~1.5 KB here (the set ~730 bytes)
    assert held / len(kept) < 1_100


def _verdict_json(i: int) -> dict[str, object]:
    return {"bottleneck": "latency-bound", "underused": True,
            "evidence": [f"GPU mean {i % 40}%", "host CPU p95 12%"],
            "window_start": "2026-11-20T12:00:00Z", "window_end": "2026-11-27T12:00:00Z",
            "hours": 168.0, "span_hours": 168.0, "coverage": 1.0, "signal": "sm_active",
            "gpus_paid": 8, "gpus_used": 8, "used_gpus": list(range(8)),
            "gpu_mean": float(i % 40), "paid_active_share": 0.1,
            "vram_peak_bytes": 10 << 30, "vram_p99_bytes": 9 << 30,
            "vram_total_bytes": 80 << 30, "host_cpu_p95": 12.0, "host_cpu_mean": 8.0,
            "host_iowait_mean": 0.5, "host_cpus": 96, "host_hot_cores": 0.2,
            "host_mem_peak_bytes": 40 << 30, "host_mem_total_bytes": 1 << 40}


def test_held_verdicts_share_one_set_and_stay_small() -> None:
    # the daemon holds a verdict per GPU instance, read back from the store's JSON
    # (costguard.recommend.stored): each with a set of its ~23 names was ~2.2 KB more
    a, b = (Efficiency.model_validate(_verdict_json(i)) for i in (1, 2))
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    assert a.model_copy(update={"gpus_used": 1}).model_fields_set == a.model_fields_set
    Efficiency.model_validate(_verdict_json(0))
    tracemalloc.start()
    try:
        kept = [Efficiency.model_validate(_verdict_json(i)) for i in range(1_000)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) == 1_000
    assert held / len(kept) < 1_800
