"""Builders shared by the daemon and reliability tests (a module, not a conftest, so imports
stay unambiguous)."""

from __future__ import annotations

import io
import logging
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
from sqlmodel import select

from costguard.actions.runner import FaultHook
from costguard.clock import Clock, ManualClock
from costguard.config import Settings
from costguard.daemon.logs import configure_logging
from costguard.daemon.settings import DaemonSettings
from costguard.engine import Engine
from costguard.policy.load import parse_policy_text
from costguard.providers.base import Provider
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow
from tests.fakes.cloud import T0, ScriptedCloud, always

IDLE_STOP = """\
policies:
  - name: idle-stop
    mode: enforce
    providers: [sim]
    filters: {{gpu: true, state: running}}
    condition:
      idle: {{below: 5, for: {window}}}
    actions:
      - notify: {{to: owner}}
      - stop: {{grace: {grace}}}
    limits: {{max_actions_per_cycle: 200, max_usd_per_hour: 100000}}
"""


def idle_policy(window: str = "10m", grace: str = "2m") -> str:
    return IDLE_STOP.format(window=window, grace=grace)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scripted_cloud(clock: Clock, idle: int = 3, busy: int = 2) -> ScriptedCloud:
    cloud = ScriptedCloud(clock)
    for i in range(idle):
        cloud.add(f"i-idle{i}", always("no_process"), tags={"owner": "ana@example.com"})
    for i in range(busy):
        cloud.add(f"i-busy{i}", always("busy"), tags={"owner": "bo@example.com"})
    return cloud


def build_engine(db: Database, provider: Provider, clock: Clock, *, policy: str | None = None,
                 poll: timedelta = timedelta(minutes=1), fault: FaultHook | None = None,
                 **settings: Any) -> Engine:
    cfg = Settings(database_url=db.url, policy_paths=[], **settings)
    cfg.poll_interval = poll  # may be under the configurable second: real cycles, quickly
    return Engine(cfg, db, {"sim": provider}, parse_policy_text(policy or idle_policy(),
                                                                "test.yml"), clock, fault=fault)


def quiet_daemon(**kw: Any) -> DaemonSettings:
    return DaemonSettings(http_enabled=False, leader_election="off", **kw)


def stop_journal(db: Database) -> dict[str, list[str]]:
    """Stop journal statuses per key, in order."""
    out: dict[str, list[str]] = {}
    with db.session() as s:
        for row in s.exec(select(ActionJournalRow).where(ActionJournalRow.action == "stop")
                          .order_by(ActionJournalRow.id)):  # type: ignore[arg-type]
            out.setdefault(row.key, []).append(row.status)
    return out


def assert_each_stop_done_once(db: Database) -> int:
    journal = stop_journal(db)
    for key, statuses in journal.items():
        assert statuses.count("done") == 1, f"{key}: {statuses}"
        assert "intent" not in statuses, f"{key} left unresolved: {statuses}"
    return len(journal)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str,
               every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def get(url: str, timeout: float = 2.0) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=timeout)
    except httpx.HTTPError:
        return None


@contextmanager
def captured_logs(fmt: str = "text", secrets: tuple[str, ...] = ()) -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    configure_logging(fmt, "DEBUG", secrets=secrets, stream=stream)  # type: ignore[arg-type]
    try:
        yield stream
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved:
            root.addHandler(h)
        root.setLevel(level)


START = T0
__all__ = ["START", "ManualClock"]
