"""A throwaway PostgreSQL server for the test suite.

`start_throwaway_postgres()` finds the server binaries, makes a private data directory under
the system temp dir, runs `initdb` and the server as an unprivileged user (initdb refuses to
run as root, and CI runs as root), listens on 127.0.0.1 on a free port with its unix socket
inside the temp dir, and returns a `PostgresServer`. `PostgresServer.stop()` stops it and
deletes every file it made. Nothing here depends on pytest: the fixtures in conftest.py wrap it.

Where the binaries are looked for, in order: `$COSTGUARD_PG_BINDIR` (when set, only there),
`initdb` on PATH, then /usr/lib/postgresql/<newest>/bin and /usr/local/pgsql/bin.
scripts/ensure-postgres.sh searches the same places and installs PostgreSQL when it can.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

BINDIR_ENV = "COSTGUARD_PG_BINDIR"
# "host:port" of a server started by someone else (the mutation driver starts one for all its
# pytest runs): the fixtures attach to it instead of starting their own, and leave it running
ATTACH_ENV = "COSTGUARD_TEST_PG_ADDRESS"
SUPERUSER = "costguard"
SESSION_DATABASE = "costguard_test"
TEST_USER = "costguard-test"  # created only when running as root and `postgres` is absent
DIR_PREFIX = "costguard-pg-"
OWNER_FILE = "owner.json"  # who started a server, so a later run can reap an orphan

_SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    # Durability is pointless for a server deleted at the end of the run, and costs seconds.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "log_min_messages": "warning",
}


class PostgresUnavailable(RuntimeError):
    """PostgreSQL cannot be started here; the message says why and how to fix it."""


@dataclass(frozen=True)
class PgBinaries:
    bindir: Path

    @property
    def initdb(self) -> str:
        return str(self.bindir / "initdb")

    @property
    def pg_ctl(self) -> str:
        return str(self.bindir / "pg_ctl")


def _complete_bindir(candidate: Path) -> bool:
    return all(os.access(candidate / exe, os.X_OK) for exe in ("initdb", "pg_ctl", "postgres"))


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.parent.name)) or (0,)


def find_binaries() -> PgBinaries:
    """Locate initdb/pg_ctl/postgres, or raise PostgresUnavailable saying where we looked."""
    explicit = os.environ.get(BINDIR_ENV)
    if explicit:
        if _complete_bindir(Path(explicit)):
            return PgBinaries(Path(explicit).resolve())
        raise PostgresUnavailable(
            f"{BINDIR_ENV}={explicit} has no initdb, pg_ctl and postgres executables; "
            f"point it at a PostgreSQL bin directory or unset it"
        )
    on_path = shutil.which("initdb")
    if on_path:
        # /usr/local/bin/initdb is often a symlink; pg_ctl finds `postgres` beside its real path.
        real = Path(on_path).resolve().parent
        if _complete_bindir(real):
            return PgBinaries(real)
    versioned = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    for candidate in [*versioned, Path("/usr/local/pgsql/bin")]:
        if _complete_bindir(candidate):
            return PgBinaries(candidate)
    raise PostgresUnavailable(
        "no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH, in "
        "/usr/lib/postgresql/*/bin or /usr/local/pgsql/bin; run scripts/ensure-postgres.sh "
        f"(as root it installs them with apt-get) or set {BINDIR_ENV}"
    )


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def server_user() -> str | None:
    """The account the server runs as: None means the current (unprivileged) user."""
    if os.geteuid() != 0:
        return None
    if _user_exists("postgres"):
        return "postgres"
    if not _user_exists(TEST_USER):
        useradd = shutil.which("useradd")
        if useradd is None:
            raise PostgresUnavailable(
                "running as root, there is no `postgres` user and no useradd to create "
                f"`{TEST_USER}`; create an unprivileged user named postgres"
            )
        done = subprocess.run(
            [useradd, "--system", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", TEST_USER],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0 and not _user_exists(TEST_USER):  # a parallel run may win
            raise PostgresUnavailable(f"useradd {TEST_USER} failed: {done.stderr.strip()}")
    return TEST_USER


def as_user(user: str | None, argv: Sequence[str]) -> list[str]:
    """`argv` run as `user` (runuser where there is one, else su)."""
    if user is None:
        return list(argv)
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", user, "--", *argv]
    return ["su", "-s", "/bin/sh", user, "-c", shlex.join(argv)]


def _temp_base(user: str | None) -> Path:
    base = Path(tempfile.gettempdir())
    if user is None:
        return base
    # Another account must be able to walk into the directory (TMPDIR may be private to root).
    for ancestor in [base, *base.parents]:
        if not os.stat(ancestor).st_mode & 0o001:
            return Path("/tmp")
    return base


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def process_alive(pid: int) -> bool:
    """True when `pid` runs and is not a zombie (an orphaned postmaster may wait unreaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" not in status


def _run(argv: Sequence[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
        stdin=subprocess.DEVNULL,
    )


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no server log)"


@dataclass
class PostgresServer:
    """A running throwaway server. Use `stop()` (idempotent) to remove every trace of it."""

    binaries: PgBinaries
    root: Path  # temp dir holding data/, the unix socket and the log
    port: int
    user: str | None
    host: str = "127.0.0.1"
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _stopped: bool = False

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the session database `costguard_test`."""
        return self.url_for(SESSION_DATABASE)

    def url_for(self, database: str) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def admin_connection(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host=self.host, port=self.port, user=SUPERUSER, dbname="postgres",
            autocommit=True, connect_timeout=10,
        )

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database (from template0) and return its name."""
        # the pid keeps names apart when several test processes share one attached server
        name = name or f"costguard_t{os.getpid()}_{next(self._names)}"
        with self.admin_connection() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(
                sql.Identifier(name)))
        return name

    def drop_database(self, name: str) -> None:
        # FORCE ends connections a test forgot to close (an engine not disposed, say).
        with self.admin_connection() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            _stop_cluster(self.binaries, self.data_dir, self.root, self.user)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class AttachedPostgres(PostgresServer):
    """A server someone else started and will stop: `stop()` leaves it running."""

    def stop(self) -> None:
        self._stopped = True


def attach_postgres(address: str) -> PostgresServer:
    """The server at "host:port" (`ATTACH_ENV`), reached as the throwaway servers' superuser."""
    host, _, port = address.rpartition(":")
    server = AttachedPostgres(binaries=PgBinaries(Path()), root=Path(), port=int(port),
                              user=None, host=host or "127.0.0.1")
    try:
        server.admin_connection().close()
    except psycopg.Error as exc:
        raise PostgresUnavailable(f"cannot attach to PostgreSQL at {address}: {exc}") from exc
    return server


def _stop_cluster(binaries: PgBinaries, data_dir: Path, cwd: Path, user: str | None) -> None:
    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return
    try:
        pid: int | None = int(pid_file.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        pid = None
    for mode in ("fast", "immediate"):
        with contextlib.suppress(subprocess.TimeoutExpired):
            done = _run(as_user(user, [binaries.pg_ctl, "-D", str(data_dir), "-m", mode, "-w",
                                       "-t", "20", "stop"]), cwd, timeout=30)
            if done.returncode == 0 or not pid_file.exists():
                break
    if pid is not None and process_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def reap_orphans(base: Path) -> None:
    """Stop and delete servers left by earlier runs whose test process died (SIGKILL, OOM)."""
    for root in base.glob(f"{DIR_PREFIX}*"):
        try:
            owner = json.loads((root / OWNER_FILE).read_text())
            owner_pid, bindir, user = int(owner["pid"]), Path(owner["bindir"]), owner["user"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if process_alive(owner_pid):
            continue
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _stop_cluster(PgBinaries(bindir), root / "data", root, user)
        shutil.rmtree(root, ignore_errors=True)


def start_throwaway_postgres(start_attempts: int = 3) -> PostgresServer:
    """Start a private server; raise PostgresUnavailable (with the server's words) if it can't."""
    binaries = find_binaries()
    user = server_user()
    base = _temp_base(user)
    reap_orphans(base)
    root = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=base))
    try:
        (root / OWNER_FILE).write_text(json.dumps(
            {"pid": os.getpid(), "bindir": str(binaries.bindir), "user": user}))
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        _initdb(binaries, root, user)
        server = _start_on_free_port(binaries, root, user, start_attempts)
        with server.admin_connection() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(SESSION_DATABASE)))
        return server
    except BaseException:
        _stop_cluster(binaries, root / "data", root, user)
        shutil.rmtree(root, ignore_errors=True)
        raise


def _initdb(binaries: PgBinaries, root: Path, user: str | None) -> None:
    argv = [binaries.initdb, "-D", str(root / "data"), "-U", SUPERUSER, "--auth=trust",
            "-E", "UTF8", "--no-locale", "--no-sync"]
    try:
        done = _run(as_user(user, argv), root, timeout=120)
    except subprocess.TimeoutExpired as exc:
        raise PostgresUnavailable("initdb took more than 120 s") from exc
    if done.returncode != 0:
        raise PostgresUnavailable(
            f"initdb failed (exit {done.returncode}) as user {user or 'current'}: "
            f"{(done.stderr or done.stdout).strip()[-800:]}"
        )


def _start_on_free_port(
    binaries: PgBinaries, root: Path, user: str | None, attempts: int
) -> PostgresServer:
    last_error = ""
    for _ in range(attempts):  # another process may grab the port between probe and bind
        port = free_port()
        settings = {**_SERVER_SETTINGS, "port": str(port), "unix_socket_directories": str(root)}
        options = " ".join(f"-c {key}={value}" for key, value in settings.items())
        server = PostgresServer(binaries=binaries, root=root, port=port, user=user)
        argv = [binaries.pg_ctl, "-D", str(server.data_dir), "-l", str(server.log_file),
                "-w", "-t", "60", "-o", options, "start"]
        try:
            done = _run(as_user(user, argv), root, timeout=90)
        except subprocess.TimeoutExpired:
            done = None
        if done is not None and done.returncode == 0 and _accepts_connections(server):
            return server
        last_error = _tail(server.log_file)
        _stop_cluster(binaries, server.data_dir, root, user)
    raise PostgresUnavailable(f"the server did not start; its log ends:\n{last_error}")


def _accepts_connections(server: PostgresServer, wait_s: float = 10.0) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with server.admin_connection() as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
