"""The org-scale bench's GCP side in its own process (bench/org_scale.py):
`python -m bench._org_gcp SPEC_JSON INFO.json`.

Seeds the project's GCP fakes (costguard.demo.gcp_fake: Compute REST, Monitoring gRPC) with
spec["vms"] VMs dealt round spec["projects"] projects (bench/gcp.seed_fleet: its shapes,
labels, protection and utilization profiles, 75 minutes of per-minute GPU metrics ending at
spec["now"], and spec["after_minutes"] past it for the cycles after the first). Monitoring
answers each call after spec["latency_ms"] and refuses a seeded share spec["throttle"] with
RESOURCE_EXHAUSTED; Compute is served plain, for the latency proxy to stand in front of.
Writes INFO.json {"compute", "monitoring", "projects", "floor", "stop", "label"} and prints
"ready"; then, for each line "verify" on stdin, writes
INFO.json's "verdict" (as bench/gcp.verify judges), the calls the fakes answered, each with
the time it came (epoch seconds: the bench splits them by cycle), and the calls refused, and
prints "done".
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.gcp import Fleet, seed_fleet, verify
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.providers.gcp.lookup import FILTER_CHARS
from costguard.providers.gcp.metrics import QUERIES

PAGE = 500  # VMs per aggregatedList page: GcpSettings.page_size's default and most


class _Stamped(Counter[str]):
    """The fake's call counter, keeping when each call came."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[float, str, int]] = []

    def __setitem__(self, key: str, value: int) -> None:
        self.events.append((time.time(), key, value - self.get(key, 0)))
        super().__setitem__(key, value)


class _StampedList(list[Any]):
    """The fake's list of RPCs (or batch sizes), keeping when each came."""

    def __init__(self, key: str, events: list[tuple[float, str, int]]) -> None:
        super().__init__()
        self.key, self.events = key, events

    def append(self, item: Any) -> None:
        self.events.append((time.time(), self.key, item if isinstance(item, int) else 1))
        super().append(item)


def project_ids(n: int) -> list[str]:
    return [f"org-proj-{k:03d}" for k in range(n)]


def floor(fake: FakeGcp, fleet: Fleet) -> Counter[str]:
    """The fewest HTTP requests and RPCs one cold cycle can make, by method: per project one
    instance listing per 500 VMs, one Cloud TPU node listing (every zone at once; none here
    holds a TPU, so one page) and one ListTimeSeries per metric costguard reads (each
    answers a page of 500 series); per project that acts one filtered re-check listing (per
    FILTER_CHARS of names) and, where it stops, one disk listing (the stopped VMs' disks:
    what a stopped VM still costs); the stops and the relabels in batches of 1,000 calls
    (one batch may hold several projects' calls)."""
    vms: dict[str, list[Any]] = {}
    for vm in fake.compute._vms.values():  # the fake's own state
        vms.setdefault(vm.project, []).append(vm)
    series = Counter((s.project, s.metric_type) for s in fake.monitoring.series)
    acted_on = fleet.expected_stop | fleet.expected_label
    calls: Counter[str] = Counter()
    for project, members in vms.items():
        calls["compute aggregatedList instances"] += -(-len(members) // PAGE)
        calls["tpu nodes list"] += 1
        per_query = max([-(-count // fake.monitoring.page_series)
                         for (p, _), count in series.items() if p == project], default=1)
        calls["monitoring ListTimeSeries"] += len(QUERIES) * per_query
        ids = {str(vm.id) for vm in members}
        acting = [vm.name for vm in members if str(vm.id) in acted_on]
        if acting:
            chars = sum(len(name) + 1 for name in acting)
            calls["compute aggregatedList instances"] += -(-chars // FILTER_CHARS)
        if ids & fleet.expected_stop:
            calls["compute aggregatedList disks"] += 1
    calls["compute batch"] += (-(-len(fleet.expected_stop) // 1000)
                               + -(-len(fleet.expected_label) // 1000))
    return calls


def main(spec_json: str, info_path: str) -> None:
    spec = json.loads(spec_json)
    info = Path(info_path)
    projects = project_ids(spec["projects"])
    fake = FakeGcp()
    fake.monitoring.latency_s = spec["latency_ms"] / 1000
    fake.monitoring.throttle = spec["throttle"]
    fake.monitoring.workers = 32
    calls = fake.compute.calls = _Stamped()
    events = calls.events
    fake.compute.batch_sizes = _StampedList("compute calls in batches", events)
    fake.monitoring.requests = _StampedList("monitoring ListTimeSeries", events)
    with fake:
        fleet = seed_fleet(fake, spec["vms"], datetime.fromisoformat(spec["now"]), projects,
                           spec.get("after_minutes", 0))
        out: dict[str, Any] = {
            "compute": fake.compute.url, "monitoring": fake.monitoring.endpoint,
            "projects": projects, "floor": floor(fake, fleet),
            "stop": len(fleet.expected_stop), "label": len(fleet.expected_label)}
        info.write_text(json.dumps(out))
        events.clear()  # seeding's own calls
        print("ready", flush=True)
        for line in sys.stdin:
            if line.strip() != "verify":
                continue
            an_hour_on = spec.get("after_minutes", 0) >= 60
            out |= {"verdict": verify(fake, fleet, an_hour_on=an_hour_on), "events": events,
                    "monitoring_throttled": fake.monitoring.throttled}
            info.write_text(json.dumps(out))
            print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
