"""costguard's cycle after the daemon was down for hours, over an organisation of both
clouds (issue 22: the memory a deployment must leave for it, measured where it matters).

Per size ($ORG_CATCH_UP_SIZES, default 30k and 100k instances), laid out as org-scale lays it
out: a share $ORG_GCP_SHARE (default 0.2; 0: EC2 alone) on Compute Engine in 3 projects per
1,000 instances, the rest on EC2 in one account per 200 instances x 4 regions
(bench/_org_fleet.py), both behind org-scale's fakes and latency proxies (100 ms a call, 2 %
throttled). A cold cycle on an empty store (org-scale reports its figures), then the daemon
is down `DOWN`; a new process on the same store runs the next cycle, the one measured. It
reads the downtime's metrics (CloudWatch's 5-minute points, Cloud Monitoring's per-minute
ones, up to 6 h), stores them, prices the downtime from the store and stops the GPUs that
went idle meanwhile. The GCP fake's metrics reach the catch-up's `now` (bench/gcp.seed_fleet
`after`); until 2026-11-28 it served none past the cold cycle, so this bench was EC2 alone.

Correct: after it, the stopped set on each cloud is every running, unprotected GPU instance
(outside an Auto Scaling group) that has been idle for the last hour (those idle all along,
stopped by the cold cycle, and those that went idle 20 minutes before it), and nothing else;
no gaps.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
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
    PROJECTS_PER_1000,
    REGIONS,
    _gcp,
    _get,
    _server,
    api_pace,
    cycle_calls,
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


def _size(n: int, work: Path, latency_ms: float, throttle: float, workers: int,
          gcp_share: float) -> dict[str, Any]:
    vms = round(n * gcp_share)
    projects = max(1, n * PROJECTS_PER_1000 // 1000) if vms else 0
    accounts = max(1, n // PER_ACCOUNT)
    spec: dict[str, Any] = {
        "instances": n - vms, "accounts": accounts, "regions": REGIONS,
        "now": NOW.isoformat(), "workers": workers, "cycles": 1, "interval_s": 300}
    fleet = generate(n - vms, accounts, REGIONS, NOW)
    fake_port, proxy_port = _free_port(), _free_port()
    db = f"sqlite:///{work / f'catch-up-{n}.db'}"
    out = work / f"catch-up-{n}.json"
    down_minutes = int(DOWN / timedelta(minutes=1))
    with _server(["bench._org_aws_http", str(fake_port), json.dumps(spec)]), \
            _server(["bench._latency_proxy", str(proxy_port), f"http://127.0.0.1:{fake_port}",
                     str(latency_ms), str(throttle)]), \
            _gcp(vms, projects, latency_ms, throttle, work, down_minutes) as (gcp, gcp_verify,
                                                                           _):
        if gcp:
            spec["gcp"] = {k: gcp[k] for k in ("projects", "compute", "monitoring")}
        endpoint = f"http://127.0.0.1:{proxy_port}"
        run_cycles(endpoint, spec, db, out)  # cold, on an empty store
        started = time.perf_counter()
        cycle = run_cycles(endpoint, {**spec, "now": (NOW + DOWN).isoformat()}, db, out)[-1]
        process_s = time.perf_counter() - started
        changes = _get(f"http://127.0.0.1:{fake_port}/_state")
        gcp_done = gcp_verify()
    stopped, want = set(changes["stopped"]), expected_after(fleet)
    summary = cycle["summary"]
    correct = "ok" if stopped == want else (
        f"stopped {len(stopped)} (expected {len(want)}; missing {len(want - stopped)}, "
        f"extra {len(stopped - want)})")
    if gcp_done and gcp_done["verdict"] != "ok":
        correct = "AWS " + correct + "; GCP " + gcp_done["verdict"]
    cpu = summary.get("stage_cpu_seconds", {})
    stages = ", ".join(f"{s} {v:.1f} ({cpu.get(s, 0):.1f} CPU)"
                       for s, v in summary["stage_seconds"].items())
    calls, requests = cycle_calls(cycle, gcp_done)
    rss = cycle["peak_rss_mb"]
    return {
        "instances": n, "accounts": accounts, "projects": projects,
        "down_h": DOWN / timedelta(hours=1),
        "wall_s": cycle["wall_s"], "client_cpu_s": cycle["cpu_s"], "peak_rss_mb": rss,
        f"under_{TARGET_RSS_MB:.0f}mb": rss < TARGET_RSS_MB,
        "gpu_minutes_stored": summary["readings"], "api_calls": requests,
        "gaps": len(summary["gaps"]), "correct": correct,
        "calls_by_operation": ", ".join(f"{op} {c}" for op, c in calls.most_common()),
        "note": f"stages {stages}; process {process_s:.0f} s",
    }


@benchmark("org-catch-up",
           description="The cycle after costguard was down 6 hours, over an organisation "
                       "laid out as org-scale's (80 % on EC2, an account per 200 instances x 4 "
                       "regions; 20 % on Compute Engine, 3 projects per 1,000 instances) "
                       "behind its fakes, 100 ms a call, 2 % throttled, 64 workers: a cold "
                       "cycle on an empty store, then a new process on the same store 6 hours "
                       "later reads the downtime's metrics (CloudWatch's 5-minute points, "
                       "Cloud Monitoring's per-minute ones), prices the downtime and stops "
                       "what went idle meanwhile. Wall, client CPU, peak RSS (the deploy "
                       "files' limit is 1 GiB), calls (GCP in HTTP requests and RPCs), gaps, "
                       "correctness.")
def org_catch_up() -> list[dict[str, Any]]:
    sizes = env_sizes("ORG_CATCH_UP_SIZES", "30000,100000")
    gcp_share = float(os.environ.get("ORG_GCP_SHARE", "0.2"))
    with tempfile.TemporaryDirectory(prefix="costguard-bench-catch-up-") as tmp:
        return [_size(n, Path(tmp), *api_pace(), gcp_share) for n in sizes]
