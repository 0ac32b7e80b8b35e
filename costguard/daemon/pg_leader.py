"""Leader election on PostgreSQL: a session advisory lock held on a dedicated connection
(see leader.py for the design: the lock lives exactly as long as that connection, and
`held()` asks the server before every cloud action)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading

import psycopg
from sqlalchemy.engine import make_url

log = logging.getLogger("costguard.leader")

LOCK_NAME = "costguard-leader"


def lock_key(name: str = LOCK_NAME) -> int:
    """A stable signed 64-bit key for pg_advisory_lock (the same in every replica)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class PostgresLeader:
    def __init__(self, url: str, key: int | None = None, connect_timeout: int = 5) -> None:
        sa_url = make_url(url)
        self._conninfo = sa_url.set(drivername="postgresql").render_as_string(
            hide_password=False)
        self._safe = sa_url.render_as_string(hide_password=True)
        self.key = lock_key() if key is None else key
        self.connect_timeout = connect_timeout
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._leading = False
        self._lock = threading.Lock()
        self._application_name = f"costguard-leader pid={os.getpid()}"

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        # keepalives: a leader cut off from the server is noticed (and its lock freed) in
        # about 30 s instead of the kernel's two hours
        return psycopg.connect(
            self._conninfo, autocommit=True, connect_timeout=self.connect_timeout,
            application_name=self._application_name,
            keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
        )

    def try_acquire(self) -> bool:
        with self._lock:
            if self._leading and self._still_held():
                return True
            self._drop()
            try:
                self._conn = self._connect()
                row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
            except psycopg.Error as exc:
                log.warning("leader election: cannot reach %s: %s", self._safe,
                            str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
                self._drop()
                return False
            self._leading = bool(row and row[0])
            if not self._leading:
                self._drop()  # a standby keeps no connection open between tries
            return self._leading

    def _still_held(self) -> bool:
        if self._conn is None or self._conn.closed:
            return False
        try:
            row = self._conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND pid = pg_backend_pid() AND objid = (%s::bigint & 4294967295)::oid "
                "AND classid = ((%s::bigint >> 32) & 4294967295)::oid",
                (self.key, self.key)).fetchone()
        except psycopg.Error:
            return False
        return bool(row and int(str(row[0])) > 0)

    def _confirmed_by_server(self) -> bool:
        """Ask on a fresh connection whether our backend still holds the lock.

        The leader connection alone is not enough: a process frozen and thawed (SIGSTOP,
        a paused VM) was seen to read a "held" answer on a session the server had already
        ended, so the fence also asks the server's lock table from outside.
        """
        if self._conn is None:
            return False
        backend, app = self._conn.info.backend_pid, self._application_name
        try:
            with psycopg.connect(self._conninfo, autocommit=True,
                                 connect_timeout=self.connect_timeout) as probe:
                row = probe.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND l.pid = %s "
                    "AND a.application_name = %s "
                    "AND l.objid = (%s::bigint & 4294967295)::oid "
                    "AND l.classid = ((%s::bigint >> 32) & 4294967295)::oid",
                    (backend, app, self.key, self.key)).fetchone()
        except psycopg.Error:
            return False
        return bool(row and int(str(row[0])) > 0)

    def held(self) -> bool:
        with self._lock:
            if not self._leading:
                return False
            if not (self._still_held() and self._confirmed_by_server()):
                log.error("leadership lost: the advisory lock is no longer held on this "
                          "replica's connection; standing down")
                self._leading = False
                self._drop()
            return self._leading

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None
        self._leading = False

    def release(self) -> None:
        """Let the lock go now: unlocked on the session, then the session closed. Closing
        alone releases it too, but only once the server has ended the session, a moment
        later: a standby that tried at once still found it held."""
        with self._lock:
            if self._leading and self._conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
            self._drop()

    def describe(self) -> str:
        return f"PostgreSQL advisory lock {self.key} on {self._safe}"
