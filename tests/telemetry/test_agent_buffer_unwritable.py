"""The agent's buffer file stops taking writes while the agent runs (a full disk; a disk
the kernel remounted read-only after an error): each minute used to end in a traceback
("agent tick failed"), and a batch the daemon took but the buffer could not forget was
posted again every second. Now it is said once, the minutes it cannot keep are counted
(no data: never idle), what it holds is still pushed with backoff, and it goes on when the
file takes writes again. SQLite's own refusal is real here (`PRAGMA query_only`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from costguard.clock import ManualClock
from costguard.telemetry.agent import Agent
from tests.telemetry.agent_helpers import START, RecordedSampler, make_agent
from tests.telemetry.test_agent_push import Daemon, minutes_of


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as c:
        yield c


def _run(agent: Agent, clock: ManualClock, seconds: int) -> None:
    for _ in range(seconds):
        agent.tick()
        clock.advance(timedelta(seconds=1))


def _writes(agent: Agent, allowed: bool) -> None:
    agent.buffer._db.execute(f"PRAGMA query_only = {0 if allowed else 1}")


def _said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_minutes_it_cannot_keep_are_counted_in_one_line_and_it_goes_on(
        tmp_path: Path, client: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    daemon, clock = Daemon(), ManualClock(START)
    agent = make_agent(tmp_path, daemon.url, client, clock,
                       RecordedSampler(clock, 2, lambda g, now: "busy"))
    with daemon.up(), caplog.at_level(logging.INFO):
        _run(agent, clock, 120)  # minute 0 closed and sent
        _writes(agent, False)
        _run(agent, clock, 180)  # minutes 1, 2 and 3 close: nowhere to keep them
        assert agent.status()["unwritten"] == 6 and agent.unwritable is not None
        _writes(agent, True)
        _run(agent, clock, 120)  # minutes 4 and 5
    assert minutes_of(daemon) == [(g, START + timedelta(minutes=m))
                                  for m in (0, 4, 5) for g in range(2)]
    assert not _said(caplog, "tick failed")
    assert len(_said(caplog, "cannot write the agent buffer")) == 1
    assert _said(caplog, "is written again; 6 summaries were lost meanwhile")
    assert agent.unwritable is None and agent.status()["unwritten"] == 6


def test_a_batch_it_cannot_forget_is_not_posted_every_second(
        tmp_path: Path, client: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    daemon, clock = Daemon(), ManualClock(START)
    agent = make_agent(tmp_path, daemon.url, client, clock,
                       RecordedSampler(clock, 1, lambda g, now: "bursty"), retry_max_s=8)
    _run(agent, clock, 150)  # the daemon is down: minutes 0 and 1 wait in the buffer
    assert len(agent.buffer) == 2
    with daemon.up(), caplog.at_level(logging.INFO):
        _writes(agent, False)
        _run(agent, clock, 120)  # taken by the daemon, but the buffer cannot forget them
        assert 3 <= daemon.requests <= 20, daemon.requests  # backing off, not 120 posts
        _writes(agent, True)
        _run(agent, clock, 120)
    assert not _said(caplog, "tick failed")
    assert len(_said(caplog, "cannot write the agent buffer")) == 1
    # minutes 2 and 3 closed while it could not write; the rest reached the daemon, once each
    assert minutes_of(daemon) == [(0, START + timedelta(minutes=m)) for m in (0, 1, 4, 5)]
    assert len(agent.buffer) == 0 and agent.status()["unwritten"] == 2
