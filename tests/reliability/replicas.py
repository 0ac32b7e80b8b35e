"""Start replica processes for the reliability tests and read back what they did."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.daemon.daemon_helpers import free_port, get

REPO = Path(__file__).resolve().parents[2]

POLICY = """\
policies:
  - name: idle-stop
    mode: enforce
    providers: [sim]
    filters: {{gpu: true, state: running}}
    condition:
      idle: {{below: 5, for: 10m}}
    actions:
      - stop: {{grace: {grace}}}
    limits: {{max_actions_per_cycle: 200, max_usd_per_hour: 100000}}
"""


def write_config(root: Path, *, instances: int = 40, grace: str = "4s") -> Path:
    (root / "policies").mkdir(exist_ok=True)
    (root / "policies" / "idle.yml").write_text(POLICY.format(grace=grace))
    (root / "costguard.yaml").write_text(
        f"providers:\n  sim: {{instances: {instances}, launches_per_day: 0}}\n"
        "policy_paths: [policies]\nalerts: {console: false}\n")
    return root


@dataclass
class Replica:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def leads(self) -> bool:
        answer = get(f"{self.base}/healthz", timeout=1.0)
        return answer is not None and bool(answer.json().get("leader"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def start_replica(root: Path, db_url: str, state_file: Path, name: str, *,
                  mode: str = "daemon", cycles: int = 0, poll: str = "2s",
                  env: dict[str, str] | None = None) -> Replica:
    port = free_port()
    full = {**os.environ, "COSTGUARD_DATABASE_URL": db_url, "COSTGUARD_POLL_INTERVAL": poll,
            "COSTGUARD_HTTP__PORT": str(port), "COSTGUARD_LOG_FORMAT": "json",
            "PYTHONPATH": str(REPO), **(env or {})}
    for var in ("CG_KILL_AT", "CG_PAUSE_AT"):
        if var not in (env or {}):
            full.pop(var, None)
    log = root / f"{name}.log"
    argv = [sys.executable, "-m", "tests.reliability.replica", mode, str(state_file)]
    if mode == "cycles":
        argv.append(str(cycles))
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, cwd=root, env=full, stdout=out,
                                stderr=subprocess.STDOUT)
    return Replica(proc, port, log)
