"""A cycle always ends in a state. Its row starts `running` with the process that runs it
(host, pid and a token of that process); it ends `ok`, `failed`, `interrupted` (Ctrl-C: the
cycle stopped between or inside a stage, the store released) or `abandoned`: the process
died (SIGKILL, a lost node, a PostgreSQL stop it could not write through) and the next cycle,
in this process or another replica, found its row still `running` and closed it.

Found dead, a row is closed at once: on this host when its pid is gone or is now this
process's (the pid was reused); rows of another host (a replica, a pod since replaced) when
they started longer ago than `stale_after` (no cycle runs that long: the scheduler's
leadership makes one runner at a time). Rows written before runners were recorded are
judged by age the same way. `costguard status` counts each state.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session, col, select

from costguard.clock import utc
from costguard.store.tables import CycleRow

log = logging.getLogger(__name__)
_TOKEN = uuid.uuid4().hex  # this process's: a pid reused after a restart is not the same runner


def _new_token() -> None:
    global _TOKEN
    _TOKEN = uuid.uuid4().hex


os.register_at_fork(after_in_child=_new_token)  # a forked child is a runner of its own
ENDED = ("ok", "failed", "interrupted", "abandoned")


def runner() -> dict[str, Any]:
    """Who runs a cycle: kept in its row's summary while it runs."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "token": _TOKEN}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # another user's process, or a platform that cannot say: not judged dead
    return True


def why_abandoned(row: CycleRow, now: datetime, stale_after: timedelta) -> str | None:
    """Why a `running` row of another cycle is known abandoned; None while it may be live."""
    ran = (row.summary or {}).get("runner")
    age = now - utc(row.started_at)
    if isinstance(ran, dict) and ran.get("host") == socket.gethostname():
        pid, token = ran.get("pid"), ran.get("token")
        if token == _TOKEN and pid == os.getpid():
            return None  # this very process runs it
        if pid == os.getpid():
            return f"its process (pid {pid}) ended: this process has that pid now"
        if isinstance(pid, int) and not _alive(pid):
            return f"its process (pid {pid} on this host) ended before it finished"
        return None
    if age > stale_after:
        where = ran.get("host") if isinstance(ran, dict) else "a costguard before 0.1"
        return (f"still running after {int(age.total_seconds() // 60)} min (started by "
                f"{where}): its process ended before it finished")
    return None


def close_abandoned(s: Session, own_id: int, now: datetime, stale_after: timedelta) -> int:
    """Close every other cycle left `running` whose runner is known gone; their count."""
    closed = 0
    for row in s.exec(select(CycleRow).where(col(CycleRow.status) == "running",
                                             col(CycleRow.id) != own_id)):
        why = why_abandoned(row, now, stale_after)
        if why is None:
            continue
        row.status, row.error, row.finished_at = "abandoned", why, now
        s.add(row)
        closed += 1
        log.warning("cycle %s was left running: closed as abandoned (%s)", row.id, why)
    return closed


def end(s: Session, cycle_id: int, status: str, now: datetime, error: str | None = None,
        summary: dict[str, Any] | None = None) -> None:
    """Write a cycle's end state."""
    row = s.get(CycleRow, cycle_id)
    if row is None:
        return
    row.status, row.finished_at = status, now
    if error is not None:
        row.error = error
    if summary is not None:
        row.summary = summary
    s.add(row)
