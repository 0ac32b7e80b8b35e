"""Helpers for benchmarks that run a tool against loopback servers in other processes."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def loopback_env(endpoint: str | None = None) -> dict[str, str]:
    """Dummy AWS credentials, no ambient AWS config or proxy, the project on PYTHONPATH;
    `endpoint` sends every AWS client there."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k.lower() not in ("http_proxy", "https_proxy",
                                                              "all_proxy")}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_SESSION_TOKEN="testing", AWS_CONFIG_FILE="/dev/null",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_EC2_METADATA_DISABLED="true",
               AWS_DEFAULT_REGION="us-east-1", NO_PROXY="127.0.0.1,localhost",
               PYTHONPATH=str(ROOT))
    if endpoint is not None:
        env["AWS_ENDPOINT_URL"] = endpoint
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server process; killed if it has not gone in 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def env_sizes(variable: str, default: str) -> list[int]:
    """Fleet sizes from `$variable` (comma-separated), else `default`."""
    return [int(s) for s in os.environ.get(variable, default).split(",")]
