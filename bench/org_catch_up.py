"""costguard's cycle after the daemon was down for hours, over an organisation's EC2 fleet
(issue 22: the memory a deployment must leave for it, measured where it matters).

Per size ($ORG_CATCH_UP_SIZES, default 30k and 100k EC2 instances, one account per 200 x 4
regions, bench/_org_fleet.py), behind the org-scale fake and its latency proxy (100 ms a call,
2 % throttled): a cold cycle on an empty store (org-scale reports its figures), then the
daemon is down `DOWN`; a new process on the same store runs the next cycle, the one measured.
It reads the downtime's CloudWatch points (5-minute, up to 6 h), stores them, prices the
downtime from the store and stops the GPUs that went idle meanwhile. EC2 alone: the GCP fake
serves only the points seeded before its `now`, so a Compute Engine share would read nothing
for the downtime and flatter the figure.

Correct: after it, the stopped set is every running, unprotected GPU instance outside an Auto
Scaling group that has been idle for the last hour (those idle all along, stopped by the cold
cycle, and those that went idle 20 minutes before it), and nothing else; no gaps.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import benchmark
from bench._org_fleet import PROTECT_TAG, Fleet, generate
from bench._procs import env_sizes
from bench._procs import free_port as _free_port
from bench.org_scale import (
    NOW,
    PER_ACCOUNT,
    REGIONS,
    _get,
    _server,
    api_pace,
    run_cycles,
)

DOWN = timedelta(hours=6)
TARGET_RSS_MB = 1024.0  # the memory limit the Helm chart, manifest and systemd unit set


def expected_after(fleet: Fleet) -> set[str]:
    """What a correct cold cycle and a correct catch-up `DOWN` later have stopped between
    them: the idle GPUs, and the ones that went idle 20 minutes before the cold cycle."""
    return {i.instance_id for i in fleet.instances
            if i.state == "running" and i.profile in ("idle", "went-idle") and i.group is None
            and PROTECT_TAG not in i.tag_map}


def _size(n: int, work: Path, latency_ms: float, throttle: float, workers: int
          ) -> dict[str, Any]:
    accounts = max(1, n // PER_ACCOUNT)
    spec: dict[str, Any] = {
        "instances": n, "accounts": accounts, "regions": REGIONS, "now": NOW.isoformat(),
        "workers": workers, "cycles": 1, "interval_s": 300}
    fleet = generate(n, accounts, REGIONS, NOW)
    fake_port, proxy_port = _free_port(), _free_port()
    db = f"sqlite:///{work / f'catch-up-{n}.db'}"
    out = work / f"catch-up-{n}.json"
    with _server(["bench._org_aws", str(fake_port), json.dumps(spec)]), \
            _server(["bench._latency_proxy", str(proxy_port), f"http://127.0.0.1:{fake_port}",
                     str(latency_ms), str(throttle)]):
        endpoint = f"http://127.0.0.1:{proxy_port}"
        run_cycles(endpoint, spec, db, out)  # cold, on an empty store
        started = time.perf_counter()
        cycle = run_cycles(endpoint, {**spec, "now": (NOW + DOWN).isoformat()}, db, out)[-1]
        process_s = time.perf_counter() - started
        changes = _get(f"http://127.0.0.1:{fake_port}/_state")
    stopped, want = set(changes["stopped"]), expected_after(fleet)
    summary = cycle["summary"]
    correct = "ok" if stopped == want else (
        f"stopped {len(stopped)} (expected {len(want)}; missing {len(want - stopped)}, "
        f"extra {len(stopped - want)})")
    cpu = summary.get("stage_cpu_seconds", {})
    stages = ", ".join(f"{s} {v:.1f} ({cpu.get(s, 0):.1f} CPU)"
                       for s, v in summary["stage_seconds"].items())
    calls = Counter(cycle["api_calls"])
    rss = cycle["peak_rss_mb"]
    return {
        "instances": n, "accounts": accounts, "down_h": DOWN / timedelta(hours=1),
        "wall_s": cycle["wall_s"], "client_cpu_s": cycle["cpu_s"], "peak_rss_mb": rss,
        f"under_{TARGET_RSS_MB:.0f}mb": rss < TARGET_RSS_MB,
        "gpu_minutes_stored": summary["readings"], "api_calls": sum(calls.values()),
        "gaps": len(summary["gaps"]), "correct": correct,
        "calls_by_operation": ", ".join(f"{op} {c}" for op, c in calls.most_common()),
        "note": f"stages {stages}; process {process_s:.0f} s",
    }


@benchmark("org-catch-up",
           description="The cycle after costguard was down 6 hours, over an organisation's "
                       "EC2 fleet (an account per 200 instances x 4 regions) behind the "
                       "org-scale fake, 100 ms a call, 2 % throttled, 64 workers: a cold "
                       "cycle on an empty store, then a new process on the same store 6 hours "
                       "later reads the downtime's 5-minute points, prices the downtime and "
                       "stops what went idle meanwhile. Wall, client CPU, peak RSS (the "
                       "deploy files' limit is 1 GiB), calls, gaps, correctness.")
def org_catch_up() -> list[dict[str, Any]]:
    sizes = env_sizes("ORG_CATCH_UP_SIZES", "30000,100000")
    with tempfile.TemporaryDirectory(prefix="costguard-bench-catch-up-") as tmp:
        return [_size(n, Path(tmp), *api_pace()) for n in sizes]
