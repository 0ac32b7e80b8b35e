"""Engine creation and schema migrations (Alembic, run programmatically)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlmodel import Session, create_engine

from costguard.errors import ConfigError, StoreError, StoreUnopenable

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

MIGRATIONS = Path(__file__).parent / "migrations"
# the newest migration's revision (a test keeps it equal to Alembic's head): a store already
# there is opened without importing Alembic or reading the migration scripts, which was a
# third of every command's start-up
HEAD_REVISION = "0020"
# every module that declares tables: imported before migrating or comparing the schema
TABLE_MODULES = ("costguard.store.tables", "costguard.store.price_tables",
                 "costguard.store.bill_tables",
                 "costguard.store.rollup_tables", "costguard.store.block_tables",
                 "costguard.alerts.tables",
                 "costguard.recommend.tables")
log = logging.getLogger(__name__)


def load_all_tables() -> None:
    for name in TABLE_MODULES:
        try:
            import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


_URL_HELP = ("use sqlite:///path/costguard.db or "
             "postgresql://user:password@host:5432/costguard")


def check_url(url: str) -> str:
    """`url` as SQLAlchemy takes it (postgres:// and postgresql:// use psycopg 3), or a
    ConfigError in one line naming the part that is wrong (never echoing a password)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if url.startswith(("postgres://", "postgresql://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(f"database_url is not a database URL: {_URL_HELP}") from None
    except ValueError as exc:  # the port
        port = str(exc).rsplit(":", 1)[-1].strip() if "int()" in str(exc) else ""
        raise ConfigError(f"database_url: the port {port or '(given)'} is not a number; "
                          f"{_URL_HELP}") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ConfigError(f"database_url: the scheme {parsed.drivername!r} is not supported; "
                          f"{_URL_HELP}")
    if parsed.get_backend_name() == "postgresql" and not (parsed.host
                                                          or parsed.query.get("host")):
        raise ConfigError(f"database_url: no host (or ?host=/socket/dir); {_URL_HELP}")
    if parsed.get_backend_name() == "postgresql" and not parsed.database:
        raise ConfigError(f"database_url: no database name after the host; {_URL_HELP}")
    return url


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (None: not SQLite, or in memory)."""
    from sqlalchemy.engine import make_url

    if not url.startswith("sqlite"):
        return None
    database = make_url(check_url(url)).database
    return Path(database) if database and database != ":memory:" else None


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL and a busy timeout so readers and the daemon coexist."""
    url = check_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def begin_for_savepoints(session: Session) -> None:
    """Make sure the session's transaction has begun in the database before a SAVEPOINT:
    pysqlite begins one only before a write, and a SAVEPOINT opened outside a transaction
    starts its own, which its RELEASE commits (SQLAlchemy's pysqlite notes), so what came
    after it could no longer be rolled back with the rest."""
    conn = session.connection()
    if conn.dialect.name == "sqlite":
        raw = conn.connection.dbapi_connection
        if raw is not None and not raw.in_transaction:
            conn.exec_driver_sql("BEGIN")


def _alembic_config(engine: Engine) -> AlembicConfig:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision` (idempotent)."""
    if revision == "head" and _stored_revision(engine) == HEAD_REVISION:
        return
    try:
        if revision == "head" and _create_sqlite_at_head(engine):
            return
        from alembic import command

        command.upgrade(_alembic_config(engine), revision)
    except OperationalError as exc:
        raise _unopenable(engine, exc, "open or migrate") from exc


def _create_sqlite_at_head(engine: Engine) -> bool:
    """Create an empty SQLite database's schema at head from `sqlite_head` (the migrations'
    own statements, recorded; a test keeps them equal) and stamp it, in one transaction; the
    write lock is taken first, so a process creating the same store at the same time waits
    and then finds it made. False, with nothing done, for anything else (another backend,
    a database with any schema object): Alembic then migrates it."""
    if engine.dialect.name != "sqlite":
        return False
    from costguard.store import sqlite_head

    if sqlite_head.REVISION != HEAD_REVISION:
        return False
    with engine.connect() as conn:
        # pysqlite would begin no transaction before DDL: begin one, taking the write lock
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        if conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar():
            conn.rollback()
            return False
        for statement in sqlite_head.STATEMENTS:
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql("INSERT INTO alembic_version (version_num) VALUES (?)",
                             (HEAD_REVISION,))
        conn.commit()
    log.info("created the schema of a new SQLite store at revision %s", HEAD_REVISION)
    return True


def _unopenable(engine: Engine, exc: OperationalError, doing: str) -> StoreUnopenable:
    why = " ".join(str(exc.orig).split()).rstrip(".")  # the driver's message, on one line
    where = engine.url.render_as_string(hide_password=True)
    stop = "" if why.endswith(("?", "!")) else "."
    return StoreUnopenable(f"cannot {doing} the database at {where}: {why}{stop} Check "
                           "database_url in costguard.yaml or COSTGUARD_DATABASE_URL.", why)


def _stored_revision(engine: Engine, *, must_open: bool = False) -> str | None:
    """The version Alembic recorded, read with one SELECT; None when there is none (or the
    database cannot be read: `upgrade` then reports why). `must_open`: a server that does
    not answer is StoreUnopenable, said as such, not taken for a schema out of date."""
    try:
        conn = engine.connect()
    except OperationalError as exc:
        if must_open:
            raise _unopenable(engine, exc, "open") from exc
        return None
    try:
        with conn:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    except (OperationalError, ProgrammingError):
        return None
    return str(rows[0][0]) if len(rows) == 1 else None


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None
    return head


class Database:
    """The store's entry point: an engine plus sessions that commit or roll back as a unit."""

    def __init__(self, url: str, *, migrate: bool = True, create: bool = True) -> None:
        """`create=False` (commands that only read): a SQLite file that does not exist is
        an error saying how to get one, not a new empty database left behind."""
        self.url = url
        if not create:
            missing = sqlite_file(url)
            if missing is not None and not missing.exists():
                raise StoreError(f"no costguard database at {missing}: run `costguard run` "
                                 "first, or point database_url (or COSTGUARD_DATABASE_URL, "
                                 "or `costguard --database`) at yours; the demo's is "
                                 "`costguard --database costguard-demo.db ...`")
        self.engine = make_engine(url)
        if migrate:
            upgrade(self.engine)
        elif _stored_revision(self.engine, must_open=True) != HEAD_REVISION:
            raise StoreError(
                "the database schema is not up to date: run `costguard db upgrade` first"
            )

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        with Session(self.engine, expire_on_commit=False) as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def dispose(self) -> None:
        self.engine.dispose()

    @property
    def safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)
