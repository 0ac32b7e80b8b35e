"""costguard over an organisation: 100,000 instances in 500 AWS accounts x 4 regions and 300
GCP projects, with the latency a real API answers in (issue 22).

Per size (10k / 30k / 100k instances; $ORG_SIZES), a share $ORG_GCP_SHARE of the instances
(default 0.2; 0: AWS alone) are Compute Engine VMs in 3 projects per 1,000 instances
(30 / 90 / 300), the rest EC2 instances in one account per 200 instances (50 / 150 / 500)
sized like a real organisation's (bench/_org_fleet.py: a few accounts hold thousands, most
a few dozen). One costguard governs both. Five processes:
- the fake (bench/_org_aws.py, served by bench/_org_aws_http.py): the EC2, CloudWatch,
  STS and Auto Scaling calls costguard makes, served from the generated fleet (moto holds
  a few thousand instances per process before each call slows down;
  tests/test_bench_org.py checks the fake against moto);
- the proxy (bench/_latency_proxy.py) in front of it: $ORG_LATENCY_MS per call (default 100)
  and a share $ORG_THROTTLE of calls refused with the API's throttling error (default 0.02);
- the GCP fakes (bench/_org_gcp.py: the project's Compute REST and Monitoring gRPC fakes,
  seeded as bench/gcp.py seeds them, the GPUs' metrics reaching on to the steady cycle,
  which reads its new minutes as the cold one read the hour), Monitoring answering at the
  same pace and refusing the same share with RESOURCE_EXHAUSTED; Compute behind a second
  proxy;
- costguard (bench/_org_cycle.py): a cold cycle on an empty store, then a steady cycle five
  minutes later, $ORG_WORKERS threads (default 64, the most `max_workers` allows: with
  32 the first cycle at 100,000 took 177 s, with 64 141 s, at the same CPU and memory)
  over the account x region scopes and the projects.

Reported per cycle: wall, client CPU (all threads) and the part of it spent inside the
clouds' client calls (botocore's, requests', gRPC's: building, signing, sending and parsing
them, costguard's parse hooks included; bench/_api_calls.py `CallCpu`), peak RSS, calls by
operation against
the floor (AWS API calls, bench/_org_fleet.Fleet.floor; GCP HTTP requests and RPCs, a batch
counted once, bench/_org_gcp.floor: the fewest calls that cycle could make), throttling
refusals absorbed, gaps, and correctness (the stopped and tagged or labelled sets equal the
fleets' expectations; nothing else changed). Targets at 100k on 2 cores: wall < 120 s, client CPU
< 60 s, RSS < 1 GB, calls <= 1.5x the floor, no throttling error surfacing as a gap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import benchmark
from bench._org_fleet import generate
from bench._procs import cpu_seconds as _cpu_s
from bench._procs import env_sizes
from bench._procs import free_port as _free_port
from bench._procs import loopback_env as _env
from bench._procs import stop as _stop

ROOT = Path(__file__).resolve().parent.parent
REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "ap-southeast-1"]
NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
PER_ACCOUNT = 200
PROJECTS_PER_1000 = 3
TARGETS = {"wall_s": 120.0, "client_cpu_s": 60.0, "peak_rss_mb": 1024.0, "calls_x_floor": 1.5}


@contextmanager
def _server(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """Start `argv` (a server that prints "ready"; its stdin and stdout are pipes)."""
    proc = subprocess.Popen([sys.executable, "-m", *argv], env=_env(), cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline() if proc.stdout else b""
        if line.strip() != b"ready":
            raise RuntimeError(f"{argv[0]} did not start")
        yield proc
    finally:
        _stop(proc)


def run_cycles(endpoint: str, spec: dict[str, Any], db_url: str, out: Path
               ) -> list[dict[str, Any]]:
    """costguard's cycles over `spec` against `endpoint`, as their own process
    (bench/_org_cycle.py), each cycle's figures as it wrote them to `out`."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench._org_cycle", endpoint, json.dumps(spec), db_url,
         str(out)], env=_env(), cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"org cycle at {spec['instances']} failed:\n{proc.stderr[-3000:]}")
    cycles: list[dict[str, Any]] = json.loads(out.read_text())["cycles"]
    return cycles


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return json.loads(answer.read())


def _verify(fleet: Any, changes: dict[str, Any]) -> str:
    stopped = set(changes["stopped"])
    tagged = {i for i, tags in changes["tags"].items() if "costguard:untagged-since" in tags}
    other = [i for i, tags in changes["tags"].items()
             if {k: v for k, v in tags.items() if k != "costguard:untagged-since"}
             != fleet.by_id[i].tag_map]
    want_stop, want_tag = fleet.expected_stopped(), fleet.expected_tagged()
    problems = []
    if stopped != want_stop:
        problems.append(f"stopped {len(stopped)} (expected {len(want_stop)}; missing "
                        f"{len(want_stop - stopped)}, extra {len(stopped - want_stop)})")
    if tagged != want_tag:
        problems.append(f"tagged {len(tagged)} (expected {len(want_tag)})")
    if other:
        problems.append(f"{len(other)} instances had other tags changed")
    return "ok" if not problems else "; ".join(problems)


def _targets(row: dict[str, Any]) -> str:
    misses = [name for name, limit in TARGETS.items() if float(row[name]) > limit]
    if row["gaps"]:
        misses.append("gaps")
    if row["correct"] != "ok":
        misses.append("correct")
    return "all met" if not misses else "MISSED: " + ", ".join(misses)


@contextmanager
def _gcp(vms: int, projects: int, latency_ms: float, throttle: float, work: Path,
         after_minutes: int = 0) -> Iterator[tuple[dict[str, Any], Any, list[int]]]:
    """The GCP fakes (bench/_org_gcp.py) with a latency proxy in front of Compute, their
    metrics reaching `after_minutes` past NOW (the later cycles read them): yields their
    info (endpoints, projects, floor), a function that verifies their state and returns the
    info with the verdict and the calls they answered, and their pids."""
    if not vms:
        yield {}, lambda: {}, []
        return
    info_path = work / "gcp.json"
    spec = {"vms": vms, "projects": projects, "now": NOW.isoformat(),
            "latency_ms": latency_ms, "throttle": throttle, "after_minutes": after_minutes}
    with _server(["bench._org_gcp", json.dumps(spec), str(info_path)]) as fakes:
        info = json.loads(info_path.read_text())
        port = _free_port()
        with _server(["bench._latency_proxy", str(port), info["compute"], str(latency_ms),
                      str(throttle)]) as proxy:
            info["compute"] = f"http://127.0.0.1:{port}"

            def verify() -> dict[str, Any]:
                assert fakes.stdin is not None and fakes.stdout is not None
                fakes.stdin.write(b"verify\n")
                fakes.stdin.flush()
                if fakes.stdout.readline().strip() != b"done":
                    raise RuntimeError("bench._org_gcp did not verify")
                done: dict[str, Any] = json.loads(info_path.read_text())
                done["proxy"] = _get(f"{info['compute']}/_proxy")
                return done

            yield info, verify, [fakes.pid, proxy.pid]


def cycle_calls(cycle: dict[str, Any], gcp_done: dict[str, Any]) -> tuple[Counter[str], int]:
    """One cycle's calls by operation, the GCP fakes' (`gcp_done`, when there are any) among
    them, and the requests they came in (AWS calls, GCP HTTP requests and RPCs)."""
    calls = Counter(cycle["api_calls"])
    requests = sum(calls.values())
    if gcp_done:
        on_gcp, gcp_requests = gcp_calls(gcp_done["events"], cycle["started_at"],
                                         cycle["ended_at"])
        calls.update({f"GCP {m}": c for m, c in on_gcp.items()})
        requests += gcp_requests
    return calls, requests


def calls_cpu(cycle: dict[str, Any]) -> str:
    """What the cycle's threads spent inside the clouds' client calls (bench/_api_calls.py
    `CallCpu`), with the AWS calls' mean: the part of the client CPU that building, signing,
    sending and parsing the calls costs, whatever costguard does with their answers."""
    seconds = cycle.get("calls_cpu_s", {})
    aws_calls = sum(cycle["api_calls"].values())
    parts = [f"{label} {spent:.1f} s" + (f" ({spent / aws_calls * 1000:.2f} ms a call)"
                                          if label == "aws" and aws_calls else "")
             for label, spent in sorted(seconds.items())]
    total = sum(seconds.values())
    return (f"CPU inside the clouds' client calls {total:.1f} s of {cycle['cpu_s']:.1f}: "
            + ", ".join(parts))


def gcp_calls(events: list[list[Any]], start: float, end: float) -> tuple[Counter[str], int]:
    """The GCP calls the fakes answered in [start, end] by method (each call of a batch
    counted), and the HTTP requests and RPCs they came in (a batch once)."""
    calls: Counter[str] = Counter()
    inner = 0
    for when, key, count in events:
        if start <= when <= end:
            if key == "compute calls in batches":
                inner += count
            else:
                calls[key if key.startswith("monitoring") else f"compute {key}"] += count
    return calls, sum(calls.values()) - inner


def _size(n: int, work: Path, latency_ms: float, throttle: float, workers: int,
          gcp_share: float) -> list[dict[str, Any]]:
    vms = round(n * gcp_share)
    projects = max(1, n * PROJECTS_PER_1000 // 1000) if vms else 0
    accounts = max(1, n // PER_ACCOUNT)
    spec: dict[str, Any] = {
        "instances": n - vms, "accounts": accounts, "regions": REGIONS,
        "now": NOW.isoformat(), "workers": workers, "cycles": 2, "interval_s": 300}
    fleet = generate(n - vms, accounts, REGIONS, NOW)
    floor = fleet.floor()
    fake_port, proxy_port = _free_port(), _free_port()
    out = work / f"org-{n}.json"
    with _server(["bench._org_aws_http", str(fake_port), json.dumps(spec)]) as fake, \
            _server(["bench._latency_proxy", str(proxy_port), f"http://127.0.0.1:{fake_port}",
                     str(latency_ms), str(throttle)]) as proxy_proc, \
            _gcp(vms, projects, latency_ms, throttle, work,
                 (spec["cycles"] - 1) * spec["interval_s"] // 60) as (gcp, gcp_verify,
                                                                      gcp_pids):
        if gcp:
            spec["gcp"] = {k: gcp[k] for k in ("projects", "compute", "monitoring")}
            floor.update({f"GCP {k}": v for k, v in gcp["floor"].items()})
        endpoint = f"http://127.0.0.1:{proxy_port}"
        pids = [fake.pid, *gcp_pids]
        fake0, proxy0 = sum(_cpu_s(p) for p in pids), _cpu_s(proxy_proc.pid)
        started = time.perf_counter()
        cycles = run_cycles(endpoint, spec, f"sqlite:///{work / f'org-{n}.db'}", out)
        elapsed = time.perf_counter() - started
        fake_cpu = sum(_cpu_s(p) for p in pids) - fake0
        proxy_cpu = _cpu_s(proxy_proc.pid) - proxy0
        proxy = _get(f"{endpoint}/_proxy")
        changes = _get(f"http://127.0.0.1:{fake_port}/_state")
        gcp_done = gcp_verify()
    verdict = _verify(fleet, changes)
    if gcp_done and gcp_done["verdict"] != "ok":
        verdict = "AWS " + verdict + "; GCP " + gcp_done["verdict"]
    throttled = proxy["throttled"] + (gcp_done["proxy"]["throttled"]
                                      + gcp_done["monitoring_throttled"] if gcp_done else 0)
    floor_total = sum(floor.values())
    rows = []
    for k, cycle in enumerate(cycles):
        calls, requests = cycle_calls(cycle, gcp_done)
        summary = cycle["summary"]
        row: dict[str, Any] = {
            "instances": n, "accounts": accounts, "scopes": accounts * len(REGIONS),
            "projects": projects, "cycle": "cold" if k == 0 else "steady",
            "wall_s": cycle["wall_s"], "client_cpu_s": cycle["cpu_s"],
            "peak_rss_mb": cycle["peak_rss_mb"], "api_calls": requests,
            "floor": floor_total if k == 0 else "",
            "calls_x_floor": requests / floor_total if k == 0 else "",
            "gaps": len(summary["gaps"]),
            "correct": verdict if k == 0 else "",
            "calls_by_operation": ", ".join(f"{op} {c}" for op, c in calls.most_common()),
            "note": "",
        }
        cpu = summary.get("stage_cpu_seconds", {})
        stages = ", ".join(f"{s} {v:.1f} ({cpu.get(s, 0):.1f} CPU)"
                           for s, v in summary["stage_seconds"].items())
        in_calls = calls_cpu(cycle)
        if k == 0:
            row["note"] = (f"{_targets(row)}; floor: "
                           + ", ".join(f"{op} {c}" for op, c in floor.most_common())
                           + f"; readings {summary['readings']:,}; stages {stages}; "
                           + in_calls)
        else:
            row["calls_x_floor"] = ""
            row["note"] = (f"readings {summary['readings']:,}; stages {stages}; {in_calls}; "
                           f"over both "
                           f"cycles: {throttled} calls throttled and retried, fake CPU "
                           f"{fake_cpu:.1f} s, proxy CPU {proxy_cpu:.1f} s, process "
                           f"{elapsed:.0f} s")
        rows.append(row)
    return rows


@benchmark("org-scale",
           description="Cold and steady costguard cycles over an organisation: 80 % of the "
                       "instances on EC2 (accounts x 4 regions, an account per 200 instances), "
                       "20 % on Compute Engine (3 projects per 1,000 instances), behind fakes "
                       "that answer each call after 100 ms and throttle 2 % of calls, 64 "
                       "workers: wall, "
                       "client CPU, RSS, calls vs the floor (AWS API calls, GCP HTTP requests "
                       "and RPCs), gaps, correctness. Targets at 100k on 2 "
                       "cores: wall < 120 s, CPU < 60 s, RSS < 1 GB, calls <= 1.5x floor, "
                       "no gaps.")
def org_scale() -> list[dict[str, Any]]:
    sizes = env_sizes("ORG_SIZES", "10000,30000,100000")
    gcp_share = float(os.environ.get("ORG_GCP_SHARE", "0.2"))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="costguard-bench-org-") as tmp:
        for n in sizes:
            rows += _size(n, Path(tmp), *api_pace(), gcp_share)
    return rows


def api_pace() -> tuple[float, float, int]:
    """The clouds' pace and costguard's threads: $ORG_LATENCY_MS per call (default 100), a
    share $ORG_THROTTLE of calls throttled (0.02), $ORG_WORKERS workers (64)."""
    return (float(os.environ.get("ORG_LATENCY_MS", "100")),
            float(os.environ.get("ORG_THROTTLE", "0.02")),
            int(os.environ.get("ORG_WORKERS", "64")))
