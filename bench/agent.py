"""The GPU agent's cost on its host, and the daemon's ingest throughput (issue #5).

agent-overhead: the real `costguard agent` command runs in a child process for a minute,
sampling 8 fake GPUs (tests/telemetry/fake_nvml.py, installed as `pynvml`; each GPU has two
processes and GPM fields) at 1 Hz with the real sleep, and pushing to a loopback ingest
server. Its CPU time (utime + stime) and memory (VmRSS, VmHWM) are read from /proc, so the
figure includes the interpreter, every import the CLI makes, the disk buffer and httpx.
Targets: under 1 % of one core, under 80 MB.

agent-ingest: the daemon's HTTP surface (build_app + StoreSink, served by the daemon's
HttpServer, i.e. uvicorn in a thread) runs in a child process over a fresh store; the bench
process plays a few agents, each a thread with its own keep-alive connection (stdlib
http.client: the load generator should leave the cores to the server it measures), POSTing
batches. Both share the machine's cores, as they would on a 2-core host, and so does whatever
else runs there: each row records the load average before it, and every configuration runs
twice. Target: >= 1,000 summaries/s on 2 cores.

Heavy imports stay inside functions: the children are plain `python -c` scripts, so nothing
this module imports inflates the agent's measured memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import benchmark

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-agent-token"
GPUS = 8
AGENT_WINDOW_S = 60.0  # a 60 s window always holds exactly one minute boundary: one push
INGEST_SECONDS = 10.0
INGEST_AGENTS = 4  # concurrent agents (client threads, one connection each)
INGEST_BATCHES = (8, 480)  # one 8-GPU host's minute; the same host's hour, replayed
INGEST_RUNS = 2  # each (store, batch) twice: the machine is shared, one figure is not enough
_TICKS = os.sysconf("SC_CLK_TCK")

# The agent child: a fake NVML module in place of pynvml, then the real command line.
# "cli" is `costguard agent` as shipped (costguard.cli imports every subsystem); "agent-app"
# is the agent's own Typer app (costguard.telemetry.cli), i.e. an agent-only entry point.
_AGENT_CHILD = """
import collections, sys
sys.path.insert(0, sys.argv[1])
from tests.telemetry.fake_nvml import FakeGpu, FakeNvml
gpus = [FakeGpu(util=30 + 7 * i, util_mem=20, mem_used=40_000_000_000, power_mw=310_000,
                temp_c=55, sm_clock=1980, processes=[(4000 + i, 30_000_000_000),
                (5000 + i, 9_000_000_000)], sm_util=25.0 + i) for i in range(int(sys.argv[2]))]
fake = FakeNvml(gpus)
fake.calls = collections.deque(maxlen=64)  # the fake's call log would otherwise grow
sys.modules["pynvml"] = fake
if sys.argv[3] == "cli":
    from costguard.cli import app
    app(["agent", *sys.argv[4:]], prog_name="costguard")
else:
    from costguard.telemetry.cli import agent_app
    agent_app(sys.argv[4:], prog_name="costguard-agent")
"""
AGENT_ENTRIES = {"cli": "costguard agent", "agent-app": "costguard-agent (the agent alone)"}

# The ingest child: the daemon's app and store sink, served as the daemon serves them.
_SERVER_CHILD = """
import signal, sys, threading
from datetime import timedelta
from costguard.clock import SystemClock
from costguard.daemon.http import HttpServer, ServiceState, build_app
from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.sink import StoreSink
from costguard.store.db import Database
from costguard.telemetry.ingest import telemetry_routes
db = Database(sys.argv[1])
metrics = DaemonMetrics()
routes = telemetry_routes(token=sys.argv[2], sink=StoreSink(db, metrics))
app = build_app(db, ServiceState(poll_interval=timedelta(minutes=5)), metrics, SystemClock(),
                extra_routes=routes)
server = HttpServer(app, "127.0.0.1", 0)
server.start()
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
print(server.port, flush=True)
done.wait()
server.stop()
db.dispose()
"""


# /proc readings ------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far (all its threads)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS


def memory_mb(pid: int) -> dict[str, float]:
    """{"VmRSS": MB now, "VmHWM": peak MB} of `pid`."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


# agent overhead ------------------------------------------------------------------------
@dataclass(frozen=True)
class AgentOverhead:
    entry: str
    window_s: float
    cpu_s: float
    startup_cpu_s: float
    rss_mb: float
    peak_rss_mb: float
    minutes_in_window: int
    minutes_total: int
    samples_total: int
    exit_code: int

    @property
    def cpu_percent(self) -> float:
        return 100 * self.cpu_s / self.window_s


def measure_agents(window_s: float = AGENT_WINDOW_S, gpus: int = GPUS,
                   entries: tuple[str, ...] = tuple(AGENT_ENTRIES),
                   settle_s: float = 2.0) -> list[AgentOverhead]:
    """Run one agent per entry point side by side (each its own instance id) against a
    loopback MemorySink for `window_s`, then SIGTERM them; one result per entry."""
    from costguard.daemon.http import HttpServer
    from costguard.telemetry.ingest import MemorySink, telemetry_app

    sink = MemorySink()
    server = HttpServer(telemetry_app(token=TOKEN, sink=sink), "127.0.0.1", 0)
    server.start()
    children: dict[str, tuple[subprocess.Popen[bytes], Any]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="costguard-bench-") as tmp:
            for entry in entries:
                buffer = Path(tmp) / f"{entry}.sqlite3"
                args = ["--url", f"http://127.0.0.1:{server.port}", "--buffer", str(buffer),
                        "--provider", "aws", "--instance-id", f"i-{entry}", "--interval", "1s"]
                log = (Path(tmp) / f"{entry}.log").open("w+")
                child = subprocess.Popen(
                    [sys.executable, "-c", _AGENT_CHILD, str(REPO_ROOT), str(gpus), entry, *args],
                    env={**os.environ, "COSTGUARD_AGENT_TOKEN": TOKEN}, stdout=log,
                    stderr=subprocess.STDOUT, cwd=tmp)
                children[entry] = (child, log)
            for entry, (child, log) in children.items():
                _wait_for(Path(tmp) / f"{entry}.sqlite3", child, log)
            time.sleep(settle_s)  # past the first ticks (GPM buffers, first flush)
            before = {e: cpu_seconds(c.pid) for e, (c, _) in children.items()}
            t0 = time.perf_counter()
            time.sleep(window_s)
            t1 = time.perf_counter()
            after = {e: cpu_seconds(c.pid) for e, (c, _) in children.items()}
            memory = {e: memory_mb(c.pid) for e, (c, _) in children.items()}
            in_window = _minutes_by_instance(sink)
            for child, _ in children.values():
                child.send_signal(signal.SIGTERM)  # keeps the partial minute and pushes it
            codes = {e: c.wait(timeout=30) for e, (c, _) in children.items()}
    finally:
        for child, log in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
            log.close()
        server.stop()
    total = _minutes_by_instance(sink)
    samples = {e: sum(m.samples for m in sink.rows.values() if m.instance_id == f"i-{e}")
               for e in entries}
    return [AgentOverhead(
        entry=e, window_s=t1 - t0, cpu_s=after[e] - before[e], startup_cpu_s=before[e],
        rss_mb=memory[e]["VmRSS"], peak_rss_mb=memory[e]["VmHWM"],
        minutes_in_window=in_window.get(f"i-{e}", 0), minutes_total=total.get(f"i-{e}", 0),
        samples_total=samples[e], exit_code=codes[e]) for e in entries]


def _minutes_by_instance(sink: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, instance, _, _ in list(sink.rows):
        out[instance] = out.get(instance, 0) + 1
    return out


def _wait_for(buffer: Path, child: subprocess.Popen[bytes], log: Any) -> None:
    deadline = time.monotonic() + 60
    while not buffer.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            raise RuntimeError(f"the agent did not start (exit {child.poll()}):\n{log.read()}")
        time.sleep(0.05)


@benchmark("agent-overhead", description=(
    "The agent in its own process for 60 s: 8 fake GPUs (2 processes each, GPM) sampled at "
    "1 Hz with the real sleep, pushed to a loopback daemon. Two agents run side by side: "
    "`costguard agent` as shipped, and the agent's own Typer app (costguard.telemetry.cli, "
    "what an agent-only entry point would load). CPU from /proc/PID/stat over the window "
    "(startup excluded), memory from /proc/PID/status. Targets: < 1 % of a core, < 80 MB. "
    "The fake NVML costs Python time only; a real driver adds its own ioctl time."))
def agent_overhead() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    load = os.getloadavg()[0]
    for r in measure_agents():
        if r.exit_code != 0:
            raise RuntimeError(f"{r.entry}: the agent exited {r.exit_code} on SIGTERM")
        rows.append({
            "entry": AGENT_ENTRIES[r.entry], "gpus": GPUS, "window_s": r.window_s,
            "cpu_s": r.cpu_s, "cpu_pct_of_core": r.cpu_percent, "under_1pct": r.cpu_percent < 1,
            "rss_mb": r.rss_mb, "peak_rss_mb": r.peak_rss_mb, "under_80mb": r.peak_rss_mb < 80,
            "startup_cpu_s": r.startup_cpu_s, "samples": r.samples_total,
            "minutes_pushed_in_window": r.minutes_in_window,
            "minutes_pushed_total": r.minutes_total, "load_1m_before": load,
        })
    return rows


# ingest throughput ---------------------------------------------------------------------
def minute_template() -> str:
    """One GPU-minute summary as the agent sends it, with `{i}`, `{g}`, `{m}` slots."""
    from costguard.model import TelemetrySource
    from costguard.telemetry.summary import summarize
    from costguard.telemetry.trace import NvmlSample, ProcessMemory, ProcessUtil

    samples = [NvmlSample(t=float(s), gpu=0, util_gpu=40 + s % 20, util_mem=20,
                          mem_used=40_000_000_000, mem_total=85_520_809_984, power_mw=310_000,
                          temp_c=55, sm_clock_mhz=1980, pstate=0,
                          processes=(ProcessMemory(pid=4242, used_bytes=30_000_000_000),),
                          process_util=(ProcessUtil(pid=4242, sm=40, mem=20, ts=s),),
                          gpm={"sm_util": 30.0 + s % 10, "sm_occupancy": 15.0}, errors={})
               for s in range(60)]
    minute = summarize(samples, provider="aws", instance_id="__I__", gpu_index=0,
                       minute=datetime(2026, 1, 1, tzinfo=UTC), source=TelemetrySource.AGENT)
    data = minute.model_dump(mode="json")
    data.update(instance_id="__I__", gpu_index="__G__", minute="__M__")
    text = json.dumps(data).replace("{", "{{").replace("}", "}}")
    return (text.replace('"__I__"', '"{i}"').replace('"__G__"', "{g}")
            .replace('"__M__"', '"{m}"'))


class BatchMaker:
    """Request bodies whose summaries never repeat a key: each request is one 8-GPU host's
    `batch // 8` minutes, in order, from a day ago (ingest refuses minutes older than 7
    days or in the future, so a long run varies the host, not the minutes)."""

    def __init__(self, batch: int, run: str) -> None:
        if batch % GPUS:
            raise ValueError(f"batch {batch} is not a whole number of {GPUS}-GPU minutes")
        self.batch, self.run = batch, run
        self.template = minute_template()
        self._base = (datetime.now(UTC) - timedelta(days=1)).replace(second=0, microsecond=0)

    def body(self, thread: int, request: int) -> str:
        per = self.batch // GPUS
        host = f"i-{self.run}-{thread:02d}-{request}"
        items: list[str] = []
        for j in range(per):
            m = (self._base + timedelta(minutes=j)).strftime("%Y-%m-%dT%H:%M:00Z")
            items.extend(self.template.format(i=host, g=g, m=m) for g in range(GPUS))
        return '{"minutes": [' + ",".join(items) + "]}"


@dataclass(frozen=True)
class IngestRun:
    seconds: float
    requests: int
    summaries: int
    latencies_s: list[float]
    server_cpu_s: float
    client_cpu_s: float  # the whole bench process, load threads and all
    stored: int
    load_before: float  # other work on the machine skews every figure here

    def percentile_ms(self, p: float) -> float:
        ordered = sorted(self.latencies_s)
        return 1000 * ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


@contextlib.contextmanager
def ingest_server(db_url: str) -> Iterator[tuple[str, int]]:
    """The daemon's HTTP app over `db_url` in a child process; yields (base URL, pid)."""
    child = subprocess.Popen([sys.executable, "-c", _SERVER_CHILD, db_url, TOKEN],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=REPO_ROOT)
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if not line.isdigit():
            child.kill()
            raise RuntimeError(f"the ingest server did not start:\n{child.communicate()[1]}")
        yield f"http://127.0.0.1:{line}", child.pid
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def measure_ingest(db_url: str, batch: int, seconds: float = INGEST_SECONDS,
                   threads: int = INGEST_AGENTS, run: str = "") -> IngestRun:
    """POST `batch`-summary bodies from `threads` keep-alive clients for `seconds`."""
    from costguard.store.db import Database
    from costguard.store.tables import GpuReadingRow

    maker = BatchMaker(batch, run=f"b{batch}{run}")
    load_before = os.getloadavg()[0]
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[str] = []
    counts = [0] * threads
    with ingest_server(db_url) as (url, pid):
        endpoint = url + "/v1/telemetry"  # one keep-alive connection per agent
        marks: dict[str, float] = {}

        def open_window() -> None:  # runs once, after every warm-up, before anyone is let go
            marks["began"], marks["cpu0"] = time.perf_counter(), cpu_seconds(pid)
            marks["client0"] = cpu_seconds(os.getpid())
            marks["stop_at"] = marks["began"] + seconds

        start = threading.Barrier(threads + 1, action=open_window)

        def load(n: int) -> None:
            with contextlib.closing(_Client(endpoint, headers)) as client:
                request = 0

                def post() -> float:
                    nonlocal request
                    body = maker.body(n, request).encode()
                    request += 1
                    began = time.perf_counter()
                    status, answer = client.post(body)
                    spent = time.perf_counter() - began
                    if status != 200 or json.loads(answer)["written"] != batch:
                        raise RuntimeError(f"{status}: {answer[:300]!r}")
                    return spent

                try:
                    for _ in range(3):  # warm-up: connection, statement caches
                        post()
                    start.wait()
                    while time.perf_counter() < marks["stop_at"]:
                        latencies[n].append(post())
                        counts[n] += 1
                except Exception as exc:  # reported by the main thread
                    errors.append(repr(exc))
                    with contextlib.suppress(threading.BrokenBarrierError):
                        start.abort()

        workers = [threading.Thread(target=load, args=(n,)) for n in range(threads)]
        for w in workers:
            w.start()
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait()
        for w in workers:
            w.join()
        if errors:
            raise RuntimeError(f"ingest failed: {errors[0]}")
        elapsed = time.perf_counter() - marks["began"]
        server_cpu = cpu_seconds(pid) - marks["cpu0"]
        client_cpu = cpu_seconds(os.getpid()) - marks["client0"]
    db = Database(db_url, migrate=False)
    try:
        from sqlalchemy import func, select

        with db.session() as s:
            stored = int(s.execute(select(func.count()).select_from(GpuReadingRow)).scalar_one())
    finally:
        db.dispose()
    requests = sum(counts)
    return IngestRun(seconds=elapsed, requests=requests, summaries=requests * batch,
                     latencies_s=[x for per in latencies for x in per],
                     server_cpu_s=server_cpu, client_cpu_s=client_cpu, stored=stored,
                     load_before=load_before)


class _Client:
    """One agent's keep-alive HTTP/1.1 connection (stdlib: a few µs of CPU per request)."""

    def __init__(self, endpoint: str, headers: dict[str, str]) -> None:
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(endpoint)
        self.path, self.headers = parts.path, headers
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port,
                                               timeout=30)

    def post(self, body: bytes) -> tuple[int, bytes]:
        self.conn.request("POST", self.path, body=body, headers=self.headers)
        response = self.conn.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        self.conn.close()


def _row(backend: str, batch: int, run: IngestRun, number: int) -> dict[str, object]:
    warmup = INGEST_AGENTS * 3 * batch
    if run.stored != run.summaries + warmup:
        raise RuntimeError(f"{backend}: {run.stored} rows stored, {run.summaries + warmup} sent")
    return {
        "store": backend, "batch": batch, "agents": INGEST_AGENTS, "run": number,
        "cores": os.cpu_count(), "seconds": run.seconds,
        "requests": run.requests, "summaries": run.summaries,
        "summaries_per_s": run.summaries / run.seconds,
        "requests_per_s": run.requests / run.seconds,
        "p50_ms": run.percentile_ms(50), "p99_ms": run.percentile_ms(99),
        "mean_ms": 1000 * statistics.fmean(run.latencies_s),
        "server_cpu_cores": run.server_cpu_s / run.seconds,
        # what one core of server could take, whatever else the machine was doing
        "summaries_per_server_cpu_s": run.summaries / run.server_cpu_s,
        "client_cpu_cores": run.client_cpu_s / run.seconds,
        "target_1000_per_s": run.summaries / run.seconds >= 1000,
        # #63's, for PostgreSQL with 8-GPU batches
        "target_5000_per_s_pg_batch_8": (run.summaries / run.seconds >= 5000
                                         if backend == "postgresql" and batch == 8 else ""),
        "load_1m_before": run.load_before,
    }


@benchmark("agent-ingest", description=(
    "POST /v1/telemetry on loopback: the daemon's app (build_app + telemetry_routes + "
    "StoreSink: one INSERT .. ON CONFLICT DO NOTHING RETURNING per request, in one "
    "transaction; on PostgreSQL the batch as one array per column through unnest, one "
    "statement text the driver parses once) served by its HttpServer (uvicorn) in a child "
    "process. "
    f"{INGEST_AGENTS} concurrent agents = {INGEST_AGENTS} threads in the bench process, each "
    f"with its own keep-alive connection (stdlib http.client), {INGEST_SECONDS:.0f} s per row, "
    "every summary a new key. Batch 8 = one 8-GPU host's minute (what an agent sends every "
    "minute); 480 = its hour (a replay after an outage). Each (store, batch) runs "
    f"{INGEST_RUNS} times. Client and server share the machine's cores, and the machine is "
    "shared with other engineers' tests and benchmarks (load_1m_before: the 1-minute load "
    "average just before the row; near or above `cores`, the server was not getting a whole "
    "core). summaries_per_server_cpu_s is the server's cost whatever the load. PostgreSQL is "
    "the suite's throwaway server (fsync off); SQLite is WAL, synchronous=NORMAL. "
    "Targets: >= 1,000 summaries/s on 2 cores; >= 5,000 on PostgreSQL with 8-GPU batches "
    "(#63)."))
def agent_ingest() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="costguard-bench-") as tmp:
        for batch in INGEST_BATCHES:
            for n in range(1, INGEST_RUNS + 1):
                url = f"sqlite:///{tmp}/ingest-{batch}-{n}.db"
                rows.append(_row("sqlite", batch, measure_ingest(url, batch), n))
    with _postgres() as pg:
        if isinstance(pg, str):
            rows.append({"store": "postgresql", "batch": "-", "agents": f"skipped: {pg}"})
            return rows
        for batch in INGEST_BATCHES:
            for n in range(1, INGEST_RUNS + 1):
                rows.append(_row("postgresql", batch,
                                 measure_ingest(pg.database_url(), batch), n))
    return rows


class _Pg:
    def __init__(self, server: Any) -> None:
        self.server = server

    def database_url(self) -> str:
        return str(self.server.url_for(self.server.create_database()))


@contextlib.contextmanager
def _postgres() -> Iterator[_Pg | str]:
    """The test suite's throwaway PostgreSQL, or why it is unavailable."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from tests.pg import PostgresUnavailable, start_throwaway_postgres

    try:
        server = start_throwaway_postgres()
    except PostgresUnavailable as exc:
        yield str(exc).splitlines()[0]
        return
    try:
        yield _Pg(server)
    finally:
        server.stop()
