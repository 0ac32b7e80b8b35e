"""How fast domain values are built: the floor under every inventory and telemetry cycle."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from bench import benchmark
from costguard.model import Instance, InstanceState, Lifecycle

_COUNT = 20_000
_AT = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _fields(i: int) -> dict[str, object]:
    return {
        "provider": "aws", "account": "123456789012", "region": "us-east-1",
        "zone": "us-east-1a", "instance_id": f"i-{i:017x}", "instance_type": "p4d.24xlarge",
        "state": InstanceState.RUNNING, "lifecycle": Lifecycle.SPOT, "gpu_count": 8,
        "gpu_model": "A100", "launch_time": _AT, "observed_at": _AT,
        "tags": {"team": "vision", "owner": f"user{i % 50}@example.com"},
    }


def _rate(label: str, build: Callable[[int], object]) -> dict[str, object]:
    started = time.perf_counter()
    for i in range(_COUNT):
        build(i)
    seconds = time.perf_counter() - started
    return {"operation": label, "count": _COUNT, "seconds": seconds,
            "per_second": _COUNT / seconds, "us_each": seconds / _COUNT * 1e6}


@benchmark("model-construction",
           description="Instance values built and validated per second (pydantic, frozen).")
def model_construction() -> list[dict[str, object]]:
    payloads = [_fields(i) for i in range(_COUNT)]
    return [
        _rate("Instance.model_validate(dict)", lambda i: Instance.model_validate(payloads[i])),
        _rate("Instance(**fields)", lambda i: Instance(**payloads[i])),
    ]
