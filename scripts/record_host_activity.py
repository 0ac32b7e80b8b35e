"""Record host-activity traces with the agent's own reader (costguard.telemetry.activity).

Each scenario runs a real workload on this machine and samples the host once a second for
`--seconds`, exactly as `costguard agent --record-host` does (the minute's last sample also
reads sessions and Jupyter kernels). The recording machine has no GPU: the process the
scenario names as "holding the GPU" is the workload's own process, whose pid NVML would
report on a GPU host. Output: tests/fixtures/host/<scenario>.jsonl, a `#` header line first.

    python scripts/record_host_activity.py --seconds 200 [--jupyter http://127.0.0.1:8888]

Scenarios: idle (nothing runs), dataset_copy (the GPU process, new, writes a dataset to
disk with fsync), dataset_download (the GPU process, new, downloads at 25 MB/s over the
network), checkpoint_write (the GPU process writes a 4 GB checkpoint in 1 GB parts with
fsync, then sleeps), cpu_preprocessing (a second process computes on one core),
notebook_idle_kernel and notebook_recent_input (a Jupyter kernel left alone, or running a
cell every 40 s; needs --jupyter). Where the process holding the GPU is not the workload's,
it is one that has run for hours (`--old-pid`, default 1), as a job's process would.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import httpx

from costguard.telemetry.activity import ActivityReader, ActivityRecorder
from costguard.telemetry.host import HostSampler

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "host"

COPY = """
import os, sys, time
path = sys.argv[1]
block = os.urandom(8 << 20)
while True:
    with open(path, "wb") as f:
        for _ in range(64):  # 512 MB a file
            f.write(block)
            f.flush()
            os.fsync(f.fileno())
    os.remove(path)
"""
CHECKPOINT = """
import os, sys, time
path = sys.argv[1]
time.sleep(20)
block = os.urandom(8 << 20)
for part in range(4):
    with open(f"{path}.{part}", "wb") as f:
        for _ in range(128):  # 1 GB a part
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
for part in range(4):
    os.remove(f"{path}.{part}")
while True:
    time.sleep(1)
"""
CPU = "x = 0\nwhile True:\n    x = (x * 31 + 7) % 1_000_003"
DOWNLOAD = """
import sys, time, httpx
url, rate = sys.argv[1], float(sys.argv[2])  # bytes a second, as a dataset copy from storage
start, got = time.time(), 0
while True:
    with httpx.stream("GET", url, timeout=60, follow_redirects=True) as r:
        for chunk in r.iter_bytes(1 << 20):
            got += len(chunk)
            ahead = got / rate - (time.time() - start)
            if ahead > 0:
                time.sleep(ahead)
"""
# a large file on the package registry, the one network this machine reaches
DOWNLOAD_INDEX = "https://pypi.org/pypi/tensorflow-cpu/json"


def spawn(code: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code, *args])


def record(name: str, seconds: float, gpu_pid: int, reader: ActivityReader,
           note: str, tick: Callable[[float], None] | None = None) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.jsonl"
    header = {"header": True, "scenario": name, "note": note, "gpu_pid": gpu_pid,
              "host": platform.node() and "recording host", "cpus": os.cpu_count(),
              "kernel": platform.release(), "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                       time.gmtime())}
    with path.open("w", encoding="utf-8") as f:
        f.write("# " + json.dumps(header) + "\n")
        recorder = ActivityRecorder(f)
        cpu = HostSampler()
        start = time.time()
        last_minute = None
        while (now := time.time()) - start < seconds:
            minute = now - now % 60
            turning = last_minute is not None and minute > last_minute
            recorder.write(reader.sample(round(now, 3), [gpu_pid], minute_end=turning),
                           cpu.sample())
            last_minute = minute
            if tick is not None:
                tick(now - start)
            time.sleep(max(0.0, 1.0 - (time.time() - now)))
    print(f"recorded {path}")
    return path


class Kernel:
    """A Jupyter kernel through the server's REST and websocket API (tornado's client)."""

    def __init__(self, url: str, kernel_id: str | None = None) -> None:
        self.url = url.rstrip("/")
        if kernel_id is None:
            self.id = httpx.post(f"{self.url}/api/kernels", json={"name": "python3"}).json()["id"]
            self.started = time.time()
        else:  # one started earlier: idle since its last activity
            model = httpx.get(f"{self.url}/api/kernels/{kernel_id}").json()
            self.id = kernel_id
            self.started = datetime.fromisoformat(
                model["last_activity"].replace("Z", "+00:00")).timestamp()

    def execute(self, code: str) -> None:
        from tornado.ioloop import IOLoop
        from tornado.websocket import websocket_connect

        async def run() -> None:
            ws = await websocket_connect(self.url.replace("http", "ws", 1)
                                         + f"/api/kernels/{self.id}/channels")
            msg_id = uuid.uuid4().hex
            await ws.write_message(json.dumps({
                "header": {"msg_id": msg_id, "username": "recorder", "session": uuid.uuid4().hex,
                           "msg_type": "execute_request", "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": code, "silent": False, "store_history": True,
                            "user_expressions": {}, "allow_stdin": False,
                            "stop_on_error": True}}))
            while True:
                raw = await ws.read_message()
                if raw is None:
                    break
                reply = json.loads(raw)
                if (reply.get("msg_type") == "execute_reply"
                        and reply.get("parent_header", {}).get("msg_id") == msg_id):
                    break
            ws.close()

        IOLoop.current().run_sync(run)

    def close(self) -> None:
        httpx.delete(f"{self.url}/api/kernels/{self.id}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=200)
    ap.add_argument("--jupyter", default=None)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--scratch", default="/tmp/costguard-record")
    ap.add_argument("--old-pid", type=int, default=1)
    ap.add_argument("--idle-kernel", default=None, help="an existing kernel's id to use")
    args = ap.parse_args()
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    client = httpx.Client()
    # the notebooks' reader asks the Jupyter server; the other hosts run none (a training
    # box): their reader is configured with no server, so kernels are not measured
    notebook_reader = ActivityReader(jupyter_urls=[args.jupyter] if args.jupyter else [],
                                     client=client)
    reader = ActivityReader()
    wanted = set(args.only or [])

    def want(name: str) -> bool:
        return not wanted or name in wanted

    def run(name: str, code: str | None, note: str, *extra: str,
            helper: str | None = None) -> None:
        if not want(name):
            return
        gpu = spawn(code, *extra) if code else None
        side = spawn(helper) if helper else None
        try:
            record(name, args.seconds, gpu.pid if gpu else args.old_pid, reader, note)
        finally:
            for p in (gpu, side):
                if p is not None:
                    p.kill()
                    p.wait()

    def notebook(name: str, kernel: Kernel, note: str,
                 tick: Callable[[float], None] | None) -> None:
        try:
            record(name, args.seconds, args.old_pid, notebook_reader, note, tick)
        finally:
            kernel.close()

    # the idle notebook's kernel starts first: by its recording, last, it has sat untouched
    # longer than the default `input_within` (15 min)
    idle_kernel = None
    if args.jupyter and want("notebook_idle_kernel"):
        idle_kernel = Kernel(args.jupyter, args.idle_kernel)
        if args.idle_kernel is None:
            idle_kernel.execute("import os; print(os.getpid())")
    run("idle", None, "nothing runs; the process holding the GPU has run for hours")
    run("dataset_copy", COPY, "the GPU process, just started, writes a dataset to disk "
        "(512 MB files, fsync per 8 MB)", str(scratch / "dataset.bin"))
    if want("dataset_download"):
        index = httpx.get(DOWNLOAD_INDEX, timeout=60)
        wheel = max(index.json()["urls"], key=lambda u: u["size"])
        run("dataset_download", DOWNLOAD, "the GPU process, just started, downloads a "
            "dataset at 25 MB/s (a large wheel from the package registry, over and over)",
            str(httpx.URL(DOWNLOAD_INDEX).join(wheel["url"])), str(25e6))
    run("checkpoint_write", CHECKPOINT, "the GPU process sleeps 20 s, writes a 4 GB "
        "checkpoint (4 x 1 GB, fsync per part), then sleeps", str(scratch / "ckpt"))
    run("cpu_preprocessing", None, "a second process computes on one core; the process "
        "holding the GPU has run for hours", helper=CPU)
    if args.jupyter and want("notebook_recent_input"):
        kernel = Kernel(args.jupyter)
        due = [0.0]

        def tick(elapsed: float) -> None:
            if elapsed >= due[0]:
                due[0] += 40.0
                kernel.execute("sum(i * i for i in range(2_000_000))")

        notebook("notebook_recent_input", kernel, "a Jupyter kernel running a short cell "
                 "every 40 s", tick)
    if idle_kernel is not None:
        while time.time() - idle_kernel.started < 16 * 60:
            time.sleep(5)
        notebook("notebook_idle_kernel", idle_kernel, "a Jupyter kernel last used "
                 f"{(time.time() - idle_kernel.started) / 60:.0f} min before the recording "
                 "began, left alone", None)


if __name__ == "__main__":
    main()
