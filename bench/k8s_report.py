"""A Kubernetes report's work once Prometheus has answered: a 1,000-GPU cluster's pods
allocated their nodes' prices per step, every pod-hour judged idle or not
(`k8s/allocate.py`), and every GPU pod's efficiency verdict (`k8s/underused.py`, what
`costguard recommend --by pod` and the console's Kubernetes page run).

k8s-report: 125 nodes of 8 GPUs, 500 pods of 2 GPUs (a fifth of them idle, a fifth using
one of their two GPUs, the rest training), read at the step `report_step` picks for 1,000
devices: a week at hourly steps, a day at 10-minute steps. Each case runs in a fresh
process (its CPU and peak RSS its own). The reading from Prometheus is not in it: a real
server's answer time is the server's; this is costguard's own share, which grows with pods
x steps.
"""

from __future__ import annotations

import json
import subprocess
import sys

from bench import benchmark

NODES, GPUS_PER_NODE, GPUS_PER_POD = 125, 8, 2

_MEASURE = """
import json, math, sys, time
from datetime import UTC, datetime, timedelta
from costguard.k8s.allocate import allocate, group
from costguard.k8s.model import ClusterRead, Device, Node, Pod, PodKey, Requests, Workload
from costguard.k8s.prices import NodePrice
from costguard.k8s.read import PodMinute
from costguard.k8s.report import report_step
from costguard.k8s.settings import ClusterSettings
from costguard.k8s.underused import judge_pods
from costguard.model import PriceQuote
from costguard.recommend.settings import RecommendSettings

nodes_n, per_node, per_pod, days = (int(a) for a in sys.argv[1:5])
end = datetime(2026, 11, 30, tzinfo=UTC)
start = end - timedelta(days=days)
step = report_step(start, end, nodes_n * per_node)
s = step.total_seconds()
stamps = [start.timestamp() + k * s for k in range(int((end - start).total_seconds() // s))]
read = ClusterRead("bench", start, end, step)
prices = {}
for n in range(nodes_n):
    name = f"node-{n}"
    read.nodes[name] = Node(name, f"aws:///us-east-1a/i-{n:017x}", gpus=per_node, cpu=96,
                            memory=1152 * 2**30, steps=set(stamps))
    prices[name] = NodePrice(PriceQuote(usd_per_hour=32.77, source="bench"), "p4d.24xlarge",
                             "bench")
    for p in range(per_node // per_pod):
        key = PodKey(f"team-{p % 7}", f"train-{n}-{p}")
        req = Requests(gpus=per_pod, gpu_units=per_pod, gpu_resource="nvidia.com/gpu",
                       cpu=16, memory=128 * 2**30)
        pod = Pod(key, node=name, workload=Workload("Job", key.name), requests=req,
                  steps={t: req for t in stamps})
        for g in range(per_pod):
            # a fifth of the pods idle, a fifth using one GPU of their two
            idle = (n + p) % 5 == 0 or ((n + p) % 5 == 1 and g == 1)
            dev = Device(f"GPU-{n}-{p}-{g}", str(p * per_pod + g), "NVIDIA A100", name)
            pod.devices[(dev.uuid, "")] = dev
            pod.readings.extend(
                PodMinute(gpu_index=g, minute=datetime.fromtimestamp(t, UTC),
                          span_minutes=int(s // 60),
                          sm_max=0.0 if idle else 70 + 10 * math.sin(t / 3600 + g),
                          sm_mean=0.0 if idle else 60.0, util_max=0.0 if idle else 98.0,
                          util_mean=0.0 if idle else 95.0, mem_used_bytes=30 * 2**30)
                for t in stamps)
        pod.cpu_used = {t: 4.0 for t in stamps}
        read.pods[key] = pod
cfg = ClusterSettings(name="bench", prometheus_url="http://127.0.0.1:9")
cpu0, wall0 = time.process_time(), time.perf_counter()
lines = allocate(read, prices, cfg)
by_ns = group(lines, ("namespace",))
cpu1 = time.process_time()
judged = judge_pods(read, lines, RecommendSettings(min_hours=1))
cpu2, wall = time.process_time(), time.perf_counter() - wall0
hwm = next(int(line.split()[1]) for line in open("/proc/self/status")
           if line.startswith("VmHWM:"))
print(json.dumps({"step_min": s / 60, "steps": len(stamps), "pods": len(read.pods),
                  "readings": sum(len(p.readings) for p in read.pods.values()),
                  "allocate_cpu_s": cpu1 - cpu0, "judge_cpu_s": cpu2 - cpu1, "wall_s": wall,
                  "underused": sum(1 for j in judged if j.efficiency.underused),
                  "idle_usd": round(sum(cl.idle_cost_micros for _, cl in by_ns) / 1e6, 2),
                  "peak_rss_mb": hwm / 1024}))
"""


@benchmark("k8s-report")
def k8s_report() -> list[dict[str, object]]:
    """Allocating and judging a 1,000-GPU cluster's week (hourly) and day (10-minute)."""
    rows: list[dict[str, object]] = []
    for days in (7, 1):
        out = subprocess.run(
            [sys.executable, "-c", _MEASURE, str(NODES), str(GPUS_PER_NODE),
             str(GPUS_PER_POD), str(days)],
            capture_output=True, text=True, check=True, timeout=1800)
        got = json.loads(out.stdout)
        rows.append({
            "period": f"{days} d at {got['step_min']:g}-minute steps ({got['steps']} steps)",
            "GPU pods": got["pods"], "pod readings": f"{got['readings']:,}",
            "allocate CPU (s)": round(got["allocate_cpu_s"], 2),
            "judge CPU (s)": round(got["judge_cpu_s"], 2),
            "underused pods": got["underused"], "wall (s)": round(got["wall_s"], 2),
            "peak RSS (MB)": round(got["peak_rss_mb"]),
        })
    return rows
