"""Leader election: exactly one replica runs the scheduler's jobs.

PostgreSQL: a session advisory lock held on a dedicated connection (not the pool's). The
lock lives exactly as long as that connection: a replica that dies (SIGKILL, OOM, node loss)
drops its socket and PostgreSQL releases the lock at once; a standby takes it on its next
try. `held()` asks the server, on the same connection, whether this session still holds the
lock: that is the fence checked right before every cloud action, so an ex-leader whose
connection was cut (network partition, pg_terminate_backend, a paused process whose session
the server dropped) cannot act although it still believes it leads.

SQLite: a single host by definition; an exclusive `flock` on `<database>.leader` keeps a
second `costguard run` on the same file from acting too.

The PostgreSQL election lives in pg_leader.py, loaded only for a PostgreSQL store: a daemon
on SQLite does not carry psycopg (~9 MB resident).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path
from typing import Protocol

from sqlalchemy.engine import make_url

log = logging.getLogger("costguard.leader")

class Leadership(Protocol):
    def try_acquire(self) -> bool:
        """Become leader if nobody is; True while this replica leads."""
        ...

    def held(self) -> bool:
        """Verify, against the lock's authority, that this replica still leads."""
        ...

    def release(self) -> None: ...

    def describe(self) -> str: ...


class AlwaysLeader:
    """No election (`daemon.leader_election: off`): one replica, by the operator's word."""

    def try_acquire(self) -> bool:
        return True

    def held(self) -> bool:
        return True

    def release(self) -> None:
        return None

    def describe(self) -> str:
        return "no election"


class FileLeader:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def try_acquire(self) -> bool:
        with self._lock:
            if self._fd is not None:
                return True
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            self._fd = fd
            return True

    def held(self) -> bool:
        with self._lock:
            return self._fd is not None

    def release(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)  # closing the descriptor drops the flock
                self._fd = None

    def describe(self) -> str:
        return f"file lock {self.path}"


def sqlite_path(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:":
        return None
    return Path(database)


def leadership_for(url: str, *, election: str = "auto", lock_file: Path | None = None
                   ) -> Leadership:
    """The right election for the database behind `url`."""
    if election == "off":
        return AlwaysLeader()
    if url.startswith("postgresql"):
        from costguard.daemon.pg_leader import PostgresLeader

        return PostgresLeader(url)
    path = lock_file or (lambda p: p.with_name(p.name + ".leader") if p else None)(
        sqlite_path(url))
    return FileLeader(path) if path is not None else AlwaysLeader()
