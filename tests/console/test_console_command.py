"""`costguard console`: the pages and API over a store, without cycles; refused off
loopback without a login, before anything listens."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.console.harness import REPO
from tests.procs import python_m_interruptible


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTGUARD_")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def test_it_serves_a_demo_store_until_interrupted(store: str, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        python_m_interruptible("costguard.entry", "--database", store, "console", "--port", "0"),
        cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/console/", line)
        assert found, line
        base = f"http://127.0.0.1:{found.group(1)}"
        page = httpx.get(f"{base}/console/?since=2026-03-09&until=2026-03-11", timeout=30)
        assert page.status_code == 200 and 'id="card-spend"' in page.text
        assert 'data-usd="0.0"' not in page.text.split('id="card-spend"')[1][:80]
        spend = httpx.get(f"{base}/api/v1/spend", params={"since": "2026-03-09",
                                                          "until": "2026-03-11"}, timeout=30)
        assert spend.status_code == 200 and spend.json()["total"]["cost_usd"] > 0
        assert httpx.get(f"{base}/healthz").status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    assert proc.returncode == 0


def test_it_refuses_to_serve_off_loopback_without_a_login(store: str, tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "costguard.entry", "--database", store, "console"],
        cwd=tmp_path, env=_env(tmp_path, COSTGUARD_HTTP__HOST="0.0.0.0"),
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "console.auth is none" in done.stderr and "docs/console.md" in done.stderr
    assert time.monotonic() - started < 60
