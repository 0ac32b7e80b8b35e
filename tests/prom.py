"""A throwaway Prometheus server (Debian's `prometheus` package) for the test suite.

`start_prometheus(tmp, config=..., history=...)` writes the configuration, turns any
OpenMetrics history into TSDB blocks with the package's own `promtool tsdb
create-blocks-from openmetrics` (hours of samples without waiting hours), starts the server
on 127.0.0.1 on a free port and waits until `/-/ready` answers. `stop()` ends it.

Where the binaries are looked for: `$COSTGUARD_PROMETHEUS` and `$COSTGUARD_PROMTOOL`, else
`prometheus` / `promtool` on PATH (scripts/ensure-prometheus.sh installs the package).
When they are missing, `PrometheusUnavailable` says so: the tests skip by name
('Prometheus unavailable'), and under CI=true they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.fakes.loopback import free_port


class PrometheusUnavailable(RuntimeError):
    pass


def binaries() -> tuple[str, str]:
    server = os.environ.get("COSTGUARD_PROMETHEUS") or shutil.which("prometheus")
    tool = os.environ.get("COSTGUARD_PROMTOOL") or shutil.which("promtool")
    if not server or not tool:
        raise PrometheusUnavailable(
            "Prometheus unavailable: no prometheus/promtool binaries (apt-get install "
            "prometheus, or run scripts/ensure-prometheus.sh)")
    return server, tool


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_prometheus(folder: Path, *, config: str = "global: {}\n",
                     history: str | None = None) -> PrometheusServer:
    server, tool = binaries()
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    if history is not None:
        source = folder / "history.om"
        source.write_text(history, encoding="utf-8")
        made = subprocess.run([tool, "tsdb", "create-blocks-from", "openmetrics", str(source),
                               str(data)], capture_output=True, text=True, timeout=120)
        if made.returncode != 0:
            raise RuntimeError(f"promtool refused the history: {made.stderr[-2000:]}")
    (folder / "prometheus.yml").write_text(config, encoding="utf-8")
    port = free_port()
    log = folder / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [server, f"--config.file={folder / 'prometheus.yml'}",
             f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
             "--storage.tsdb.retention.time=30d", "--log.level=info"],
            stdout=out, stderr=subprocess.STDOUT, cwd=folder)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited {process.returncode}: "
                               f"{log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return PrometheusServer(url, process, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("prometheus did not become ready within 60 s")
