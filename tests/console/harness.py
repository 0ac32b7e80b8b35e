"""A daemon's HTTP app with the console, over a store the demo filled: what the console's
tests (and a person trying it: `python -m tests.console.harness`) look at.

The demo runs `HOURS` simulated hours ending at `NOW` into a SQLite file; the server's clock
stands at the demo's end, so every window a test asks for is the same on any day.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.console.app import console_server
from costguard.daemon.metrics import DaemonMetrics
from costguard.demo.run import demo_clock, demo_policy_paths, enforced, run_demo
from costguard.policy.load import load_policy_set
from costguard.store.db import Database

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)  # a Tuesday, on the hour
HOURS = 12
REPO = Path(__file__).resolve().parents[2]


def fill_demo_store(path: Path, hours: int = HOURS) -> str:
    """Run the demo into `path` (SQLite); returns its URL."""
    url = f"sqlite:///{path}"
    settings = Settings(database_url=url, policy_paths=[REPO / "policies"])
    run_demo(settings, Console(file=io.StringIO()), hours=hours, verbose=False,
             clock=demo_clock(NOW, hours))
    return url


def console_settings(url: str, console: Mapping[str, Any] | None = None,
                     host: str = "127.0.0.1") -> Settings:
    return Settings(database_url=url, policy_paths=[REPO / "policies"],
                    http={"host": host}, console=dict(console or {}))


@contextmanager
def serve(settings: Settings, clock: ManualClock | None = None,
          metrics: DaemonMetrics | None = None) -> Iterator[str]:
    """The daemon's app (health, metrics, console, API) on loopback; yields its base URL."""
    clock = clock or ManualClock(NOW)
    db = Database(settings.database_url, create=False)
    # the policies as the demo ran them (enforced): the daemon's engine hands its own
    policies = enforced(load_policy_set(demo_policy_paths(settings)))
    # always bound to loopback: the console decides by `http.host` what it would serve there
    server = console_server(settings, db, clock, lambda: policies, metrics=metrics,
                            bind="127.0.0.1", port=0)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
        db.dispose()


if __name__ == "__main__":  # a console to look at by hand
    import sys
    import tempfile

    where = Path(tempfile.mkdtemp()) / "demo.db"
    store = fill_demo_store(where)
    with serve(console_settings(store)) as base:  # auth none: loopback only, read-only
        print(f"open {base}/console/ (store {where}; Ctrl-C ends)", file=sys.stderr)
        while True:
            time.sleep(3600)
