"""costguard vs Cloud Custodian on the same seeded EC2 GPU fleet in a loopback moto server.

For each fleet size: a fresh `moto_server` subprocess on 127.0.0.1, the c7n peer's fleet
(tests/fakes/aws_fleet.py: seed 20240611, 4 regions, 2 h of 5-minute CloudWatch points), then
ONE tool run: costguard's full cycle (bench/_aws_cycle.py, policies in bench/policies/) or
`custodian run` over the peer's policies.yml (all 4 regions in one process). costguard runs a
second time, a new process on the same store 5 minutes on (a restarted daemon's cycle: what
each cycle of a running costguard costs). Then the server goes and the next tool gets a new
one, so neither tool sees the other's changes or data.

Measured per run: wall time of the tool's process, its CPU (user+sys, from wait4) and peak RSS,
moto's CPU over the run (/proc/PID/stat), API calls by operation (botocore's
`_make_api_call`, the same counter in both processes), and correctness against the fleet's
expected document: the newly stopped set equals the idle unprotected GPUs, the tagged set
equals the instances without `team`, nothing else changed state or tags.

Needs the peer's virtualenv (/tmp/peer-c7n/venv, built from
/work/shared/peers/c7n/requirements.lock.txt; override with $C7N_VENV) for the c7n rows;
without it only costguard's rows are written. Sizes: $AWS_BENCH_SIZES (default 1000,4000);
Cloud Custodian runs at the sizes up to $AWS_BENCH_C7N_MAX (default 4000): its one
GetMetricStatistics per instance makes moto quadratic, and at 10,000 one run takes many
minutes (its NOTES.md has its 8,000 figures).
"""

from __future__ import annotations

import compileall
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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import benchmark
from bench._procs import cpu_seconds as _cpu_s
from bench._procs import env_sizes
from bench._procs import free_port as _free_port
from bench._procs import loopback_env as _env
from bench._procs import stop as _stop

ROOT = Path(__file__).resolve().parent.parent
PEER = Path(os.environ.get("C7N_PEER", "/work/shared/peers/c7n"))
C7N_VENV = Path(os.environ.get("C7N_VENV", "/tmp/peer-c7n/venv"))
COSTGUARD_TAG = "costguard:untagged-since"
C7N_TAG = "costguard-untagged"


@contextmanager
def _moto_server() -> Iterator[tuple[str, int]]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("moto_server did not come up")
        yield url, proc.pid
    finally:
        _stop(proc)


@dataclass
class ToolRun:
    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    moto_cpu_s: float
    calls: Counter[str]


def _run_tool(argv: list[str], url: str, moto_pid: int, calls: Path, key: str | None
              ) -> ToolRun:
    """Run a tool against the moto server at `url`; its API call counts are read from
    `calls` (under `key` when given)."""
    moto0 = _cpu_s(moto_pid)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=_env(url), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    output = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    moto_cpu = _cpu_s(moto_pid) - moto0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv[:3]} failed:\n{output.decode(errors='replace')[-3000:]}")
    counted = json.loads(calls.read_text())
    return ToolRun(wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime,
                   peak_rss_mib=usage.ru_maxrss / 1024, moto_cpu_s=moto_cpu,
                   calls=Counter(counted[key] if key else counted))


def _build(url: str, n: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from tests.fakes.aws_fleet import DEFAULT_REGIONS, DEFAULT_SEED, build_fleet, plan_fleet

    specs = plan_fleet(n, DEFAULT_REGIONS, DEFAULT_SEED)
    anchor = datetime.now(UTC).replace(microsecond=0)
    from tests.fakes.aws_fleet import server_clients

    doc = build_fleet(server_clients(url), specs, DEFAULT_REGIONS, anchor)
    return doc, specs


def _live_state(url: str, regions: list[str]) -> dict[str, tuple[str, dict[str, str]]]:
    from tests.fakes.aws_fleet import server_clients

    clients = server_clients(url)
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for region in regions:
        pages = clients("ec2", region).get_paginator("describe_instances").paginate()
        for page in pages:
            for res in page["Reservations"]:
                for inst in res["Instances"]:
                    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                    out[inst["InstanceId"]] = (inst["State"]["Name"], tags)
    return out


def _verify(url: str, doc: dict[str, Any], specs: list[dict[str, Any]], tag: str,
            *, tags_protected: bool) -> str:
    """'ok', or what differs from the expected document. costguard never touches an instance
    tagged `costguard:protect=true`, not even to tag it (`tags_protected=False`); c7n's
    mark-for-op policy has no such filter and tags them too."""
    regions = doc["regions"]
    live = _live_state(url, regions)
    exp = doc["expected"]
    protected = {s["id"] for s in specs if s["protect"] == "true"}
    want_stop = {i for r in regions for i in exp[r]["idle_gpu_stop"]}
    want_tag = {i for r in regions for i in exp[r]["missing_team"]}
    if not tags_protected:
        want_tag -= protected
    prestopped = {i for r in regions for i in exp[r]["prestopped"]}
    stopped = {i for i, (state, _) in live.items() if state in ("stopping", "stopped")}
    tagged = {i for i, (_, tags) in live.items() if tag in tags}
    problems = []
    if stopped - prestopped != want_stop:
        problems.append(f"stopped {len(stopped - prestopped)} (expected {len(want_stop)}; "
                        f"missing {len(want_stop - stopped)}, extra "
                        f"{len((stopped - prestopped) - want_stop)})")
    if tagged != want_tag:
        problems.append(f"tagged {len(tagged)} (expected {len(want_tag)})")
    retagged = [s["id"] for s in specs
                if {k: v for k, v in live[s["id"]][1].items() if k != tag} != dict(s["tags"])]
    if retagged:
        problems.append(f"{len(retagged)} instances had other tags changed")
    return "ok" if not problems else "; ".join(problems)


def _row(tool: str, n: int, run: ToolRun, verdict: str, extra: str = "") -> dict[str, object]:
    top = ", ".join(f"{op} {c}" for op, c in run.calls.most_common(6))
    return {
        "instances": n, "tool": tool, "wall_s": run.wall_s, "client_cpu_s": run.cpu_s,
        "moto_cpu_s": run.moto_cpu_s, "peak_rss_mib": run.peak_rss_mib,
        "api_calls": sum(run.calls.values()), "correct": verdict, "calls_by_operation": top,
        "note": extra,
    }


def _stages(result: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in result["summary"]["stage_seconds"].items())


def _costguard(n: int, work: Path
               ) -> tuple[dict[str, object], ToolRun, dict[str, object], ToolRun]:
    # byte-compiled, as pip installs a package (and as Custodian's virtualenv is): with
    # PYTHONDONTWRITEBYTECODE set, the cycle would otherwise compile ~100 modules (~0.1 s)
    compileall.compile_dir(ROOT / "costguard", quiet=1)
    compileall.compile_dir(ROOT / "bench", quiet=1)
    with _moto_server() as (url, pid):
        doc, specs = _build(url, n)
        # the cycle runs a minute after the fleet's metrics end, as a daemon tick would; from
        # the anchor, not the wall clock: a build slowed by load must not age the metrics
        anchor = datetime.fromisoformat(doc["metrics_anchor_utc"])
        now = anchor.replace(second=0, microsecond=0) + timedelta(minutes=1)
        out = work / f"n{n}.cycle.json"
        db = f"sqlite:///{work / f'n{n}.db'}"
        run = _run_tool([sys.executable, "-m", "bench._aws_cycle", url, now.isoformat(), db,
                         str(out), *doc["regions"]], url, pid, out, "api_calls")
        verdict = _verify(url, doc, specs, COSTGUARD_TAG, tags_protected=False)
        # the daemon restarted (a new process) on the same store a cycle later: what every
        # cycle of a running costguard costs, with nothing new to act on
        again_out = work / f"n{n}.again.json"
        later = (now + timedelta(minutes=5)).isoformat()
        again = _run_tool([sys.executable, "-m", "bench._aws_cycle", url, later, db,
                           str(again_out), *doc["regions"]], url, pid, again_out, "api_calls")
        again_verdict = _verify(url, doc, specs, COSTGUARD_TAG, tags_protected=False)
    again_result = json.loads(again_out.read_text())
    again_row = _row("costguard, restarted a cycle later", n, again, again_verdict,
                     f"same store, a new process, 5 minutes on; stages {_stages(again_result)}")
    result = json.loads(out.read_text())
    findings = result["summary"]["findings"]
    ondemand = sum(doc["counts"][r]["ondemand_gpu_running"] for r in doc["regions"])
    if findings.get("on-demand-gpu", 0) != ondemand:
        verdict += f"; on-demand notices {findings.get('on-demand-gpu', 0)} != {ondemand}"
    note = f"cycle {result['cycle_s']:.1f} s in-process; stages {_stages(result)}"
    return _row("costguard", n, run, verdict, note), run, again_row, again


def _c7n(n: int, work: Path) -> tuple[dict[str, object], ToolRun]:
    with _moto_server() as (url, pid):
        doc, specs = _build(url, n)
        out = work / f"n{n}.c7n-calls.json"
        outdir = work / f"n{n}-c7n"
        env_regions = [a for r in doc["regions"] for a in ("-r", r)]
        argv = [str(C7N_VENV / "bin" / "python"), str(ROOT / "bench" / "_api_calls.py"),
                str(out), "run", "--cache", "memory", *env_regions, "-s", str(outdir),
                str(PEER / "policies.yml")]
        run = _run_tool(argv, url, pid, out, None)  # AWS_ENDPOINT_URL: c7n's sessions use it
        verdict = _verify(url, doc, specs, C7N_TAG, tags_protected=True)
    reported = 0
    for region in doc["regions"]:
        path = outdir / region / "gpu-on-demand-report" / "resources.json"
        reported += len(json.loads(path.read_text()))
    ondemand = sum(doc["counts"][r]["ondemand_gpu_running"] for r in doc["regions"])
    if reported != ondemand:
        verdict += f"; on-demand report {reported} != {ondemand}"
    return _row("cloud-custodian 0.9.53", n, run, verdict), run


TARGET_SIZE = 4000  # the issue sets its targets at 4,000 instances


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _targets(n: int, ours: ToolRun, theirs: ToolRun, our_check: str, their_check: str
             ) -> str:
    """The first targets (set at 4,000 instances), judged at every size; the line says
    whether this is the size they are set at."""
    calls = sum(theirs.calls.values()) / sum(ours.calls.values())
    cpu = theirs.cpu_s / ours.cpu_s
    label = ("targets" if n == TARGET_SIZE
             else f"the {TARGET_SIZE:,}-instance targets, for reference at {n:,}")
    return (f"{label}: API calls >=10x fewer {_verdict(calls >= 10)} ({calls:.1f}x); "
            f"client CPU >=3x less {_verdict(cpu >= 3)} ({cpu:.2f}x); "
            f"lower wall {_verdict(ours.wall_s < theirs.wall_s)}; "
            f"correct {_verdict(our_check == 'ok')} (c7n {their_check})")


def _org_targets(ours: ToolRun, again: ToolRun, theirs: ToolRun) -> str:
    """Issue 22's targets at 4,000 (<= 24 calls, >= 6x less client CPU than Custodian),
    for the first run on an empty store and for the restarted daemon."""
    parts = []
    for label, run in (("first run", ours), ("restarted", again)):
        calls = sum(run.calls.values())
        cpu = theirs.cpu_s / run.cpu_s
        parts.append(f"{label}: <=24 calls {_verdict(calls <= 24)} ({calls}), "
                     f">=6x less CPU {_verdict(cpu >= 6)} ({cpu:.2f}x)")
    return "issue 22 targets, " + "; ".join(parts)


@benchmark("aws-vs-c7n",
           description="One full costguard cycle vs Cloud Custodian on the same seeded EC2 GPU "
                       "fleet (4 regions) in a loopback moto server: time, CPU, API calls, "
                       "correctness; and costguard restarted a cycle later on the same store "
                       "(what each cycle of the running daemon costs).")
def aws_vs_c7n() -> list[dict[str, object]]:
    sizes = env_sizes("AWS_BENCH_SIZES", "1000,4000")
    have_c7n = (C7N_VENV / "bin" / "custodian").exists() and (PEER / "policies.yml").exists()
    c7n_max = int(os.environ.get("AWS_BENCH_C7N_MAX", "4000"))
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="costguard-bench-aws-") as tmp:
        work = Path(tmp)
        for n in sizes:
            row, ours, again_row, again = _costguard(n, work)
            rows += [row, again_row]
            if not have_c7n or n > c7n_max:
                # say so: a table without the peer's rows must not read as a comparison
                why = (f"not run: no Cloud Custodian at {C7N_VENV} (see {PEER}/run.sh)"
                       if not have_c7n else f"not run above AWS_BENCH_C7N_MAX={c7n_max}")
                rows.append({"instances": n, "tool": "cloud-custodian", "note": why})
                continue
            peer_row, theirs = _c7n(n, work)
            rows.append(peer_row)
            rows.append({
                "instances": n, "tool": "ratio c7n / costguard",
                "wall_s": theirs.wall_s / ours.wall_s, "client_cpu_s": theirs.cpu_s / ours.cpu_s,
                "moto_cpu_s": theirs.moto_cpu_s / max(ours.moto_cpu_s, 1e-9),
                "peak_rss_mib": theirs.peak_rss_mib / ours.peak_rss_mib,
                "api_calls": round(sum(theirs.calls.values()) / sum(ours.calls.values()), 1),
                "correct": "", "calls_by_operation": "",
                "note": _targets(n, ours, theirs, str(row["correct"]),
                                 str(peer_row["correct"]))
                + (f"; {_org_targets(ours, again, theirs)}" if n == TARGET_SIZE else ""),
            })
    return rows
