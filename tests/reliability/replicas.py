"""Start replica processes for the reliability tests and read back what they did."""

from __future__ import annotations

import os
import select
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


class ForkServer:
    """`replica forks`: one interpreter imports costguard once and forks a fresh process for
    each run of cycles, so a test can kill many processes without paying many start-ups."""

    def __init__(self, root: Path, db_url: str, state_file: Path) -> None:
        self.root = root
        self.log = root / "forks.log"
        env = {**os.environ, "COSTGUARD_DATABASE_URL": db_url, "COSTGUARD_LOG_FORMAT": "json",
               "PYTHONPATH": str(REPO)}
        for var in ("CG_KILL_AT", "CG_PAUSE_AT", "CG_GATE"):
            env.pop(var, None)
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.reliability.replica", "forks", str(state_file)],
                cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)

    def run(self, name: str, cycles: int, kill_at: str | None = None,
            timeout: float = 60.0) -> tuple[int, Path]:
        """Run `cycles` in a new process (killed at `kill_at`, if given): its exit code, log."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        log = self.root / f"{name}.log"
        self.proc.stdin.write(f"{cycles} {kill_at or '-'} {log}\n".encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.close()
            raise AssertionError(f"no answer for {name} within {timeout}s:\n"
                                 + self.log.read_text()[-3000:])
        return int(line), log

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
