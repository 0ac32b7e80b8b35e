"""The reliability figures every test run prints at its end (tests/conftest.py collects them
from the xdist workers): what the trust-boundary tests measured, so a regression shows as a
number, not only as a failure.

A test calls `count(name, ok)` per attempt (a request answered without a 5xx, a forged
summary refused) or `measure(name, value, unit, target)` for a figure it measured."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

_counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # name -> [ok, total]
_measures: dict[str, dict[str, Any]] = {}


def count(name: str, ok: bool) -> None:
    entry = _counts[name]
    entry[0] += int(ok)
    entry[1] += 1


def measure(name: str, value: float, unit: str, target: str) -> None:
    _measures[name] = {"value": value, "unit": unit, "target": target}


def dump() -> str:
    return json.dumps({"counts": dict(_counts), "measures": _measures})


def merge(text: str) -> None:
    data = json.loads(text)
    for name, (ok, total) in data.get("counts", {}).items():
        _counts[name][0] += ok
        _counts[name][1] += total
    _measures.update(data.get("measures", {}))


def lines() -> list[str]:
    out = [f"{name}: {ok} of {total}" for name, (ok, total) in sorted(_counts.items())]
    out += [f"{name}: {m['value']:.4g} {m['unit']} (target {m['target']})"
            for name, m in sorted(_measures.items())]
    return out
