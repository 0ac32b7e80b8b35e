"""The agent's disk buffer: every summary goes here first, and leaves only once the daemon
has acknowledged it.

A SQLite file (stdlib, crash-safe, one transaction per change) holds the records in arrival
order. It is bounded by record count and by bytes; when full, the OLDEST records are
dropped (recent data matters most to an idle decision) and the drops are counted, so the
loss is visible in the agent's log and status. Survives restarts of the agent (the file
persists) and of the daemon (records stay until acknowledged).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from costguard.errors import ConfigError

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pending (seq INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (name, value) VALUES ('dropped', 0);
CREATE TABLE IF NOT EXISTS hooks (id TEXT PRIMARY KEY, status TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '', reported INTEGER NOT NULL DEFAULT 0);
"""
# a pre-stop hook the agent took on: `running` until it finishes; the row outlives the run so
# a hook handed out again (the daemon's answer lost, a restart) is never run twice


_DAMAGED = {"SQLITE_NOTADB", "SQLITE_CORRUPT"}  # not a database, a malformed one


class _Corrupt(Exception):
    """The buffer's file is not a sound SQLite database."""


def _open(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        db.executescript(_SCHEMA)
        # every page of the file read once (~50 ms for the 64 MiB it may reach): a
        # damaged page found now, not by the push loop at the first record it reads
        found = [str(row[0]) for row in db.execute("PRAGMA quick_check(3)")]
    except sqlite3.DatabaseError as exc:
        db.close()
        if getattr(exc, "sqlite_errorname", "") in _DAMAGED:
            raise _Corrupt(str(exc)) from None
        raise
    if found != ["ok"]:
        db.close()
        raise _Corrupt("; ".join(found))
    return db


def _hooks_in(damaged: Path) -> list[tuple[str, str, str, int]] | None:
    """The hooks a damaged buffer recorded, where its hooks table can still be read (the
    damage is often elsewhere: records are most of the file): a hook it ran is never run
    again. None where they cannot be read."""
    try:
        db = sqlite3.connect(f"{damaged.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        rows = db.execute("SELECT id, status, detail, reported FROM hooks").fetchall()
        return [(str(i), str(st), str(d), int(r)) for i, st, d, r in rows]
    except sqlite3.Error:
        return None
    finally:
        db.close()


def _move_aside(path: Path) -> Path:
    """Renames the file (and SQLite's files beside it) to `NAME.damaged-SECONDS`."""
    aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
    for suffix in ("", "-wal", "-shm", "-journal"):
        here = path.with_name(path.name + suffix)
        if here.exists():
            here.rename(aside.with_name(aside.name + suffix))
    return aside


@dataclass(frozen=True, slots=True)
class Pending:
    seq: int
    body: str


class DiskBuffer:
    """A bounded, persistent FIFO of JSON records (one summary each)."""

    def __init__(
        self, path: str | Path, *, max_records: int = 100_000, max_bytes: int = 64 * 2**20
    ) -> None:
        if max_records < 1 or max_bytes < 1:
            raise ConfigError("the agent buffer needs max_records >= 1 and max_bytes >= 1")
        self.path = Path(path)
        self.max_records = max_records
        self.max_bytes = max_bytes
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._db = _open(self.path)
            except _Corrupt as exc:
                # a power cut on a host without a safe disk cache, a full disk, a file
                # written by something else: the agent would fail to start, and restart, for
                # ever. Kept aside for a person to look at, and the agent goes on afresh.
                aside = _move_aside(self.path)
                hooks = _hooks_in(aside)
                log.error("the agent buffer %s is damaged (%s): moved to %s; starting an "
                          "empty one. The summaries it held are lost (those GPU-minutes "
                          "read as no data, never idle); %s", self.path, exc, aside,
                          "its record of pre-stop hooks could not be read: a hook handed "
                          "out again may run again" if hooks is None else
                          f"its record of {len(hooks)} pre-stop hook(s) is kept")
                self._db = _open(self.path)
                self._db.executemany("INSERT OR IGNORE INTO hooks (id, status, detail, "
                                     "reported) VALUES (?, ?, ?, ?)", hooks or [])
        except (OSError, sqlite3.Error, _Corrupt) as exc:
            raise ConfigError(
                f"cannot open the agent buffer at {self.path}: {exc}; point --buffer at a "
                "writable file (default /var/lib/costguard-agent/buffer.sqlite3)"
            ) from None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- pre-stop hooks (costguard.telemetry.hooks) -------------------------------------------
    def hook_claim(self, hook_id: str) -> bool:
        """Take on a hook: True the first time, False if this agent ever took it before."""
        with self._lock, self._tx():
            cur = self._db.execute(
                "INSERT OR IGNORE INTO hooks (id, status) VALUES (?, 'running')", (hook_id,))
            return cur.rowcount == 1

    def hook_finish(self, hook_id: str, status: str, detail: str) -> None:
        with self._lock, self._tx():
            # only a running hook: one a restart already reported failed stays so
            self._db.execute("UPDATE hooks SET status = ?, detail = ? WHERE id = ? AND "
                             "status = 'running'", (status, detail, hook_id))

    def hook_result(self, hook_id: str) -> tuple[str, str] | None:
        """(status, detail) of a hook this agent took on; None if it never did."""
        with self._lock:
            row = self._db.execute("SELECT status, detail FROM hooks WHERE id = ?",
                                   (hook_id,)).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def hooks_to_report(self) -> list[tuple[str, str, str]]:
        """(id, status, detail) of finished hooks the daemon has not acknowledged."""
        with self._lock:
            rows = self._db.execute("SELECT id, status, detail FROM hooks WHERE status != "
                                    "'running' AND reported = 0 ORDER BY rowid").fetchall()
        return [(str(i), str(st), str(d)) for i, st, d in rows]

    def hook_reported(self, hook_id: str) -> None:
        with self._lock, self._tx():
            self._db.execute("UPDATE hooks SET reported = 1 WHERE id = ?", (hook_id,))

    def hooks_interrupted(self, detail: str) -> int:
        """Hooks left `running` by an agent that died: failed, never run again."""
        with self._lock, self._tx():
            cur = self._db.execute("UPDATE hooks SET status = 'failed', detail = ? WHERE "
                                   "status = 'running'", (detail,))
            return cur.rowcount

    def append(self, bodies: Sequence[str]) -> int:
        """Add records at the tail; returns how many old records were dropped to fit."""
        if not bodies:
            return 0
        with self._lock, self._tx():
            self._db.executemany("INSERT INTO pending (body) VALUES (?)", [(b,) for b in bodies])
            dropped = self._trim()
            if dropped:
                self._db.execute(
                    "UPDATE counters SET value = value + ? WHERE name = 'dropped'", (dropped,)
                )
            return dropped

    def _trim(self) -> int:
        count, size = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(body AS BLOB))), 0) FROM pending"
        ).fetchone()
        dropped = 0
        if count > self.max_records:
            excess = count - self.max_records
            self._db.execute(
                "DELETE FROM pending WHERE seq IN (SELECT seq FROM pending ORDER BY seq LIMIT ?)",
                (excess,),
            )
            dropped += excess
            size = self._bytes()
        while size > self.max_bytes:
            row = self._db.execute(
                "SELECT seq, LENGTH(CAST(body AS BLOB)) FROM pending ORDER BY seq LIMIT 1"
            ).fetchone()
            if row is None:
                break
            self._db.execute("DELETE FROM pending WHERE seq = ?", (row[0],))
            size -= row[1]
            dropped += 1
        return dropped

    def _bytes(self) -> int:
        row = self._db.execute(
            "SELECT COALESCE(SUM(LENGTH(CAST(body AS BLOB))), 0) FROM pending"
        ).fetchone()
        return int(row[0])

    def peek(self, limit: int) -> list[Pending]:
        """The oldest `limit` records, oldest first (they stay until `ack`)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, body FROM pending ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
        return [Pending(int(seq), str(body)) for seq, body in rows]

    def ack(self, up_to_seq: int) -> None:
        """Forget every record up to and including `up_to_seq` (the daemon has them)."""
        with self._lock, self._tx():
            self._db.execute("DELETE FROM pending WHERE seq <= ?", (up_to_seq,))

    def discard(self, seqs: Sequence[int]) -> None:
        """Forget records the daemon refused for good (counted as dropped)."""
        with self._lock, self._tx():
            self._db.executemany("DELETE FROM pending WHERE seq = ?", [(s,) for s in seqs])
            self._db.execute(
                "UPDATE counters SET value = value + ? WHERE name = 'dropped'", (len(seqs),)
            )

    @property
    def dropped(self) -> int:
        """Records lost so far: dropped when full, or refused by the daemon as invalid."""
        with self._lock:
            row = self._db.execute("SELECT value FROM counters WHERE name = 'dropped'").fetchone()
        return int(row[0])

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM pending").fetchone()[0])

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes()

    def _tx(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on error: a crash never leaves half a batch."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")
