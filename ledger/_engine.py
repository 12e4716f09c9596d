"""Engines for the two supported ledgers: embedded SQLite (WAL) and PostgreSQL (asyncpg)."""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///writesafe.db"

# How long a PostgreSQL statement may run before the driver gives up on it (seconds).
_STATEMENT_TIMEOUT = 10.0

# How long a SQLite writer waits for the database lock before giving up (seconds).
_SQLITE_BUSY_TIMEOUT = 30.0

# The execution option that marks a read-only transaction (`reader`).
_READ_ONLY = "writesafe_read_only"


class UnsupportedDatabase(ValueError):
    """The database URL names a backend the ledger does not support."""


def create_engine(
    url: str | URL,
    *,
    schema: str | None = None,
    connect_timeout: float = 5.0,
    statement_timeout: float = _STATEMENT_TIMEOUT,
    pool_size: int = 10,
) -> AsyncEngine:
    """Create the ledger's engine; `schema` (PostgreSQL only) isolates the ledger's tables."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if schema is not None:
            raise UnsupportedDatabase("schema= is only supported on PostgreSQL")
        if parsed.get_driver_name() != "aiosqlite":
            raise UnsupportedDatabase("use the async SQLite driver: sqlite+aiosqlite:///path.db")
        return _sqlite_engine(parsed)
    if parsed.get_backend_name() == "postgresql":
        if parsed.get_driver_name() != "asyncpg":
            raise UnsupportedDatabase("use the async PostgreSQL driver: postgresql+asyncpg://…")
        return _postgres_engine(parsed, schema, connect_timeout, statement_timeout, pool_size)
    raise UnsupportedDatabase(f"unsupported ledger backend {parsed.get_backend_name()!r}")


def _postgres_engine(
    url: URL, schema: str | None, connect_timeout: float, statement_timeout: float, pool_size: int
) -> AsyncEngine:
    connect_args = _session_options(schema, connect_timeout, statement_timeout)
    # Calls beyond the pool queue for a connection rather than opening more: PostgreSQL's
    # connection limit is shared by every worker.
    return create_async_engine(
        url, connect_args=connect_args, pool_size=pool_size, max_overflow=pool_size
    )


def postgres_connect_options(
    url: str | URL,
    *,
    schema: str | None = None,
    connect_timeout: float = 5.0,
    statement_timeout: float = _STATEMENT_TIMEOUT,
) -> dict[str, Any]:
    """`asyncpg.connect` keyword arguments for the connections `create_engine` would open."""
    parsed = make_url(url)
    return {
        **parsed.translate_connect_args(username="user", database="database"),
        **parsed.query,
        **_session_options(schema, connect_timeout, statement_timeout),
    }


def _session_options(
    schema: str | None, connect_timeout: float, statement_timeout: float
) -> dict[str, Any]:
    options: dict[str, Any] = {"timeout": connect_timeout, "command_timeout": statement_timeout}
    if schema is not None:
        options["server_settings"] = {"search_path": schema}
    return options


def _sqlite_engine(url: URL) -> AsyncEngine:
    engine = create_async_engine(url, connect_args={"timeout": _SQLITE_BUSY_TIMEOUT})
    _configure_sqlite(engine.sync_engine)
    return engine


def sqlite_path(url: str | URL) -> str:
    """The file of a SQLite ledger URL, for the writer's own `sqlite3` connections
    (`writesafe.ledger._sqlite_writer`)."""
    database = make_url(url).database
    if not database or database == ":memory:":
        raise UnsupportedDatabase("the embedded ledger needs a file: sqlite+aiosqlite:///path.db")
    return database


def connect_sqlite(path: str, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """A `sqlite3` connection to the ledger's file, configured as the engine's connections are."""
    connection = sqlite3.connect(
        path, timeout=_SQLITE_BUSY_TIMEOUT, check_same_thread=check_same_thread
    )
    configure_sqlite_connection(connection)
    return connection


def configure_sqlite_connection(dbapi_connection: Any) -> None:
    """WAL, durable commits, foreign keys and a busy wait, on a new driver connection."""
    # Take transaction control from the driver, so that each transaction begins as we say
    # (the engine's: IMMEDIATE for a write, deferred for a read; the writer's: IMMEDIATE).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # FULL: a committed intent survives power loss, which is the whole point of recording it.
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={int(_SQLITE_BUSY_TIMEOUT * 1000)}")
    cursor.close()


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        configure_sqlite_connection(dbapi_connection)

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # A deferred transaction that reads then writes fails with SQLITE_BUSY instead of waiting;
        # taking the write lock up front makes claims queue behind each other. One that only
        # reads (`reader`) needs no lock a writer holds (WAL), so it takes none.
        read_only = conn.get_execution_options().get(_READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def reader(engine: AsyncEngine) -> AsyncEngine:
    """`engine` for transactions that only read. On SQLite they begin deferred: a WAL reader
    neither waits for the writers nor holds them up, where a transaction begun `IMMEDIATE` takes
    the write lock for as long as it lasts. No write goes through it: a deferred transaction that
    turns to writing may fail with SQLITE_BUSY instead of waiting for the lock."""
    return engine.execution_options(**{_READ_ONLY: True})


def is_sqlite(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "sqlite"
