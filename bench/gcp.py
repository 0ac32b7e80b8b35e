"""One full costguard cycle on a 3,000-VM Compute Engine fleet in 20 zones (issue 4).

The local fakes (costguard.demo.gcp_fake.server: Compute REST over HTTP, Monitoring
gRPC) run in this process, seeded with a fixed fleet (seed 4): 3 projects x 20 zones
(5 regions x 4), 70 % GPU VMs (A100 a2-highgpu-1g, L4 g2-standard-4, T4 on n1-standard-8),
75 minutes of per-minute Ops Agent NVML utilization and DCGM SM activity per GPU. Then ONE
`Engine.run_cycle()` in a child process (bench/gcp_cycle.py) through the real Google
clients: inventory (aggregatedList), GPU metrics (ListTimeSeries), evaluate, act (label the
VMs without `team`, stop the idle GPUs, notify on-demand GPUs).

Measured: the child's wall time, CPU (user+sys, from wait4) and peak RSS; the fakes' CPU
(this process, over the child's run); API calls by method as the fakes counted them; and
correctness from the fake's final state: the stopped set equals the idle unprotected running
GPU VMs (DCGM SM activity < 5 % for the hour, which includes VMs busy with tiny kernels whose
NVML utilization reads 100 %), the labelled set equals the unprotected VMs without `team`,
and nothing else changed.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import benchmark
from bench._procs import env_sizes
from costguard.demo.gcp_fake.monitoring import FakeSeries
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.providers.gcp.metrics import HOST_CPU_STATES, HOST_MEM, SM_V2, UTIL

ROOT = Path(__file__).resolve().parent.parent
SEED = 4
PROJECTS = ["fleet-train", "fleet-serve", "fleet-research"]
REGIONS = ["us-central1", "us-east1", "europe-west4", "asia-southeast1", "us-west1"]
ZONES = [f"{r}-{z}" for r in REGIONS for z in "abcd"]
GPU_SHAPES = [("a2-highgpu-1g", None, "NVIDIA A100-SXM4-40GB"),
              ("g2-standard-4", None, "NVIDIA L4"),
              ("n1-standard-8", "nvidia-tesla-t4", "Tesla T4")]
# (profile, weight): util %, SM fraction per minute
PROFILES = [("busy", 55), ("idle", 25), ("tiny-kernels", 5), ("went-idle", 10), ("no-agent", 5)]
MINUTES = 75
LABEL = "costguard_untagged-since"


@dataclass
class Fleet:
    expected_stop: set[str] = field(default_factory=set)
    # running, unprotected GPUs idle for the last 20 minutes: stopped by a cycle an hour on
    went_idle: set[str] = field(default_factory=set)
    expected_label: set[str] = field(default_factory=set)
    prestopped: set[str] = field(default_factory=set)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)


def _points(rng: random.Random, profile: str, now: datetime, sm: bool, after: int = 0,
            later: random.Random | None = None) -> list[tuple[datetime, float]]:
    """The `MINUTES` before `now`, drawn from `rng`; then `after` minutes past `now` (the
    profile goes on: a GPU that went idle stays idle), drawn from `later`, so that the
    fleet `rng` deals is the same whatever `after` is."""
    out = []
    for m in range(MINUTES + after):
        draw = rng if m < MINUTES or later is None else later
        t = now - timedelta(minutes=MINUTES - m) + timedelta(seconds=30)
        busy = profile == "busy" or (profile == "went-idle" and m < MINUTES - 20)
        if profile == "tiny-kernels":
            value = draw.uniform(0.005, 0.02) if sm else 100.0
        elif busy:
            value = draw.uniform(0.3, 0.85) if sm else draw.uniform(35, 97)
        else:
            value = draw.uniform(0.0, 0.02) if sm else draw.uniform(0, 2)
        out.append((t, round(value, 4)))
    return out


# the Ops Agent's host series of a VM (the memory in use, the CPU's I/O wait), as it writes
# them beside the GPUs' (tests/providers/gcp/test_gcp_host_metrics.py): drawn from no
# random source, so the fleet dealt is the same with them as before them
HOST_SERIES = ((HOST_MEM, {"state": "used"}, 24 * 2**30),
               (HOST_CPU_STATES, {"cpu_number": "", "cpu_state": "wait"}, 1.5))


def _host_series(fake: FakeGcp, project: str, zone: str, instance_id: str, now: datetime,
                 after: int) -> None:
    times = [now - timedelta(minutes=MINUTES - m) + timedelta(seconds=30)
             for m in range(MINUTES + after)]
    for metric_type, labels, value in HOST_SERIES:
        fake.monitoring.series.append(FakeSeries(
            project=project, metric_type=metric_type,
            resource_labels={"project_id": project, "instance_id": instance_id, "zone": zone},
            metric_labels=dict(labels), points=[(t, value) for t in times]))


def seed_fleet(fake: FakeGcp, n: int, now: datetime, projects: list[str] | None = None,
               after: int = 0) -> Fleet:
    """`n` VMs dealt round the `projects` (default PROJECTS), each project's over ZONES;
    their GPUs' metrics from `MINUTES` before `now` to `after` minutes past it (the cycles
    a bench runs after the first read them)."""
    projects = projects or PROJECTS
    rng = random.Random(SEED)
    later = random.Random(SEED + 1)  # the minutes past `now`: the fleet stays the same
    fleet = Fleet()
    for i in range(n):
        project = projects[i % len(projects)]
        zone = ZONES[(i // len(projects)) % len(ZONES)]
        labels = {"team": rng.choice(["vision", "nlp", "recsys"])} if rng.random() < 0.8 else {}
        protect = rng.random() < 0.1
        if protect:
            labels["costguard_protect"] = "true"
        status = "TERMINATED" if rng.random() < 0.05 else "RUNNING"
        spot = rng.random() < 0.25
        gpu = rng.random() < 0.7
        created = now - timedelta(days=3)
        if gpu:
            machine, accel, model = rng.choice(GPU_SHAPES)
            vm = fake.compute.add_instance(project, zone, f"gpu-{i:05d}", machine, labels=labels,
                                           accelerators=[(accel, 1)] if accel else None,
                                           status=status, spot=spot, created=created)
            profile = rng.choices([p for p, _ in PROFILES], [w for _, w in PROFILES])[0]
            if profile != "no-agent":
                for metric, sm in ((UTIL, False), (SM_V2, True)):
                    fake.monitoring.add_gpu_series(project, metric, str(vm.id),
                                                   _points(rng, profile, now, sm, after,
                                                           later), zone=zone,
                                                   model=model)
                _host_series(fake, project, zone, str(vm.id), now, after)
            fleet.counts[f"gpu {profile}"] += 1
            if profile in ("idle", "tiny-kernels") and not protect and status == "RUNNING":
                fleet.expected_stop.add(str(vm.id))
            if profile == "went-idle" and not protect and status == "RUNNING":
                fleet.went_idle.add(str(vm.id))
        else:
            vm = fake.compute.add_instance(project, zone, f"cpu-{i:05d}", "n2-standard-8",
                                           labels=labels, status=status, spot=spot,
                                           created=created)
        if status != "RUNNING":
            fleet.prestopped.add(str(vm.id))
        if "team" not in labels and not protect:
            fleet.expected_label.add(str(vm.id))
        fleet.labels[str(vm.id)] = dict(labels)
    return fleet


def verify(fake: FakeGcp, fleet: Fleet, *, an_hour_on: bool = False) -> str:
    """"ok", or what differs from what the cycles should have done; `an_hour_on`: a cycle
    ran an hour or more after the seeded `now`, so the GPUs that went idle are stopped too."""
    vms = {str(vm.id): vm for vm in fake.compute._vms.values()}  # the fake's own state
    stopped = {i for i, vm in vms.items() if vm.status in ("STOPPING", "TERMINATED")}
    stopped -= fleet.prestopped
    labelled = {i for i, vm in vms.items() if LABEL in vm.labels}
    problems = []
    want = fleet.expected_stop | (fleet.went_idle if an_hour_on else set())
    if stopped != want:
        problems.append(f"stopped {len(stopped)} (expected {len(want)}; missing "
                        f"{len(want - stopped)}, extra {len(stopped - want)})")
    if labelled != fleet.expected_label:
        problems.append(f"labelled {len(labelled)} (expected {len(fleet.expected_label)})")
    changed = [i for i, vm in vms.items()
               if {k: v for k, v in vm.labels.items() if k != LABEL} != fleet.labels[i]]
    if changed:
        problems.append(f"{len(changed)} VMs had other labels changed")
    return "ok" if not problems else "; ".join(problems)


def run_cycle(n: int, work: Path, http_batch: bool = True, partial: bool = True
              ) -> dict[str, object]:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    with FakeGcp() as fake:
        fleet = seed_fleet(fake, n, now)
        fake.compute.calls.clear()
        way = f"{'batched' if http_batch else 'per-vm'}-{'partial' if partial else 'whole'}"
        name = f"gcp-{n}-{way}"  # a store of its own
        out = work / f"{name}.json"
        argv = [sys.executable, "-m", "bench.gcp_cycle", fake.compute.url,
                fake.monitoring.endpoint, now.isoformat(), f"sqlite:///{work / f'{name}.db'}",
                str(out), *PROJECTS]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_PROXY": "127.0.0.1,localhost",
               "COSTGUARD_BENCH_GCP_HTTP_BATCH": "1" if http_batch else "0",
               "COSTGUARD_BENCH_GCP_PARTIAL": "1" if partial else "0"}
        fake_cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        output = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        fake_cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"gcp cycle failed:\n{output.decode(errors='replace')[-3000:]}")
        verdict = verify(fake, fleet)
        calls = Counter({f"compute {k}": v for k, v in fake.compute.calls.items()})
        calls["monitoring ListTimeSeries (RPCs, pages incl.)"] = len(fake.monitoring.requests)
        batches = fake.compute.batch_sizes[:]
        # API calls count each call in a batch (as the quota does); HTTP requests count a
        # batch once, however many calls it holds
        api_calls = sum(v for k, v in calls.items() if k != "compute POST batch")
        http_requests = api_calls - sum(batches) + len(batches)
    result = json.loads(out.read_text())
    summary = result["summary"]
    stages = ", ".join(f"{k} {v:.2f}" for k, v in summary["stage_seconds"].items())
    return {
        "instances": n, "compute_calls": "http batches" if http_batch else "one per VM",
        "vms_listed": "partial" if partial else "whole",
        "zones": len(ZONES), "projects": len(PROJECTS),
        "wall_s": wall, "cycle_s": result["cycle_s"],
        "client_cpu_s": usage.ru_utime + usage.ru_stime,
        "fake_cpu_s": (fake_cpu1.ru_utime + fake_cpu1.ru_stime)
                      - (fake_cpu0.ru_utime + fake_cpu0.ru_stime),
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "api_calls": api_calls,
        "http_requests": http_requests,
        "calls_by_method": ", ".join(f"{k} {v}" for k, v in sorted(calls.items())),
        "stopped_expected": len(fleet.expected_stop),
        "labelled_expected": len(fleet.expected_label),
        "correct": verdict,
        "note": f"readings {summary['readings']}, gaps {len(summary['gaps'])}; stages {stages}",
    }


@benchmark("gcp-fleet-cycle",
           description="One full costguard cycle (inventory, Cloud Monitoring GPU metrics, "
                       "evaluate, act) on 3,000 Compute Engine VMs in 20 zones against the local "
                       "fakes (each VM with the Ops Agent writes its GPUs' series and its "
                       "host's memory and I/O wait): time, CPU, memory, API calls (each call "
                       "in a batch counted, as "
                       "the quota counts it) and HTTP requests, correctness. Targets: client "
                       "CPU <= 8 s, act stage <= 5 s.")
def gcp_fleet_cycle() -> list[dict[str, object]]:
    sizes = env_sizes("GCP_BENCH_SIZES", "3000")
    with tempfile.TemporaryDirectory(prefix="costguard-bench-gcp-") as tmp:
        # each way on the same machine in one run: the batches' effect and the partial
        # listing's, whatever its load
        return [run_cycle(n, Path(tmp), batched, partial) for n in sizes
                for batched, partial in ((False, True), (True, False), (True, True))]
