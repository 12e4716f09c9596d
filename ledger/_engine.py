"""Engines for the two supported ledgers: embedded SQLite (WAL) and PostgreSQL (asyncpg)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from uuid import uuid4

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///writesafe.db"

# How long a PostgreSQL statement may run before the driver gives up on it (seconds).
_STATEMENT_TIMEOUT = 10.0

# How long a SQLite writer waits for the database lock before giving up (seconds).
SQLITE_BUSY_TIMEOUT = 30.0
_BUSY_TIMEOUT_MS = int(SQLITE_BUSY_TIMEOUT * 1000)

# The execution option that marks a read-only transaction (`reader`).
_READ_ONLY = "writesafe_read_only"

# The execution option that bounds a write transaction's wait for SQLite's write lock in seconds
# (`with_lock_wait`; unset: `SQLITE_BUSY_TIMEOUT`, as long as any write).
_LOCK_WAIT = "writesafe_lock_wait"

# SQLite's busy wait for one try of a write transaction's BEGIN IMMEDIATE (ms): long enough that
# SQLite's own waits do nearly all the waiting (waiting on the event loop between quick tries
# instead cost a third of the writes under contention), short enough for a close to wait out.
_TRY_MS = 200

# The connection's `info` entry that holds its busy wait now, in ms (`_set_busy_wait`).
_BUSY_WAIT = "writesafe_busy_wait"


class UnsupportedDatabase(ValueError):
    """The database URL names a backend the ledger does not support, or an option it cannot take;
    `setting`: the one to change (`database_url`, or `schema` for a schema it cannot use)."""

    def __init__(self, message: str, *, setting: str = "database_url") -> None:
        super().__init__(message)
        self.setting = setting


class Pooler(StrEnum):
    """What stands between the ledger and PostgreSQL (`?pooler=` in the URL)."""

    NONE = "none"
    SESSION = "session"  # PgBouncer's session mode: a client keeps its server connection
    # PgBouncer's transaction mode: consecutive transactions may run on different server
    # connections, so no prepared statement may be reused beyond the one it was made for.
    TRANSACTION = "transaction"


# The ledger's own URL options, and the driver's, each converted to the type asyncpg takes:
# from a URL every value is a string, which asyncpg would reject or misread.
_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_URL_OPTIONS = ("pooler", "statement_cache_size", "sslmode", "ssl", "application_name")


@dataclass(frozen=True, slots=True)
class PostgresUrl:
    """A `postgresql+asyncpg://` URL split into what the server is told and what we are."""

    url: URL  # without its query
    pooler: Pooler
    connect: Mapping[str, Any]  # `asyncpg.connect` keyword arguments from the query


def postgres_url(url: str | URL) -> PostgresUrl:
    """Parse a PostgreSQL ledger URL; a bad or unknown query option raises `UnsupportedDatabase`
    naming it, before any connection is made."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "postgresql" or parsed.get_driver_name() != "asyncpg":
        raise UnsupportedDatabase("use the async PostgreSQL driver: postgresql+asyncpg://…")
    pooler, connect = Pooler.NONE, dict[str, Any]()
    server_settings: dict[str, str] = {}
    for name, given in parsed.query.items():
        if not isinstance(given, str):
            raise UnsupportedDatabase(f"database URL option {name!r} is given more than once")
        if name == "pooler":
            pooler = Pooler(_choice(name, given, tuple(Pooler)))
        elif name == "statement_cache_size":
            connect[name] = _count(name, given)
        elif name in ("sslmode", "ssl"):
            connect["ssl"] = _choice(name, given, _SSL_MODES)
        elif name == "application_name":
            server_settings[name] = given
        else:
            known = ", ".join(_URL_OPTIONS)
            raise UnsupportedDatabase(f"unknown database URL option {name!r} (known: {known})")
    if server_settings:
        connect["server_settings"] = server_settings
    return PostgresUrl(parsed.set(query={}), pooler, connect)


def parse_url(url: str | URL) -> URL:
    """`url` parsed, or `UnsupportedDatabase` saying it is not a database URL at all."""
    try:
        return make_url(url)
    except ArgumentError as error:
        raise UnsupportedDatabase(f"not a database URL: {error}") from None


def _choice(name: str, given: str, allowed: tuple[str, ...]) -> str:
    if given not in allowed:
        raise UnsupportedDatabase(
            f"database URL option {name}={given!r} is not one of {', '.join(allowed)}"
        )
    return given


def _count(name: str, given: str) -> int:
    if not given.isdigit():
        raise UnsupportedDatabase(f"database URL option {name}={given!r} is not a whole number")
    return int(given)


@dataclass(frozen=True, slots=True)
class ConnectionBudget:
    """How many server connections a process may hold, in all its pools, and for how long an
    unused one stays open.

    The guard's writer takes `writer` of them; SQLAlchemy's pool the rest, of which it keeps at
    most `_SQLALCHEMY_KEPT` open between uses (the others close when they are handed back).
    A call that finds every connection of its pool in use waits up to `wait_seconds` for one,
    then fails as "the budget is used up", not as an outage.
    """

    max_connections: int = 20
    writer: int = 10
    idle_seconds: float = 60.0
    wait_seconds: float = 5.0

    def __post_init__(self) -> None:
        if self.max_connections < 2:
            raise UnsupportedDatabase("the connection budget needs at least 2 connections")

    @property
    def writer_size(self) -> int:
        """The writer's share: as asked, leaving at least one for SQLAlchemy's pool."""
        return max(1, min(self.writer, self.max_connections - 1))

    @property
    def engine_size(self) -> int:
        return self.max_connections - self.writer_size


# PostgreSQL's longest name (NAMEDATALEN - 1): a longer one would be cut short by the server.
_MAX_NAME_BYTES = 63

# SQLAlchemy's connections kept open between uses; one serves the reconciler and the reads.
_SQLALCHEMY_KEPT = 2


def create_engine(
    url: str | URL,
    *,
    schema: str | None = None,
    connect_timeout: float = 5.0,
    statement_timeout: float = _STATEMENT_TIMEOUT,
    budget: ConnectionBudget | None = None,
) -> AsyncEngine:
    """Create the ledger's engine; `schema` (PostgreSQL only) isolates the ledger's tables."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        if schema is not None:
            raise UnsupportedDatabase("schema= is only supported on PostgreSQL", setting="schema")
        if parsed.get_driver_name() != "aiosqlite":
            raise UnsupportedDatabase("use the async SQLite driver: sqlite+aiosqlite:///path.db")
        return _sqlite_engine(parsed)
    if parsed.get_backend_name() == "postgresql":
        if schema is not None and not 0 < len(schema.encode()) <= _MAX_NAME_BYTES:
            raise UnsupportedDatabase(
                f"schema= must be a PostgreSQL name of 1 to {_MAX_NAME_BYTES} bytes, "
                f"not {schema!r}",
                setting="schema",
            )
        return _postgres_engine(
            postgres_url(parsed),
            schema,
            connect_timeout,
            statement_timeout,
            budget or ConnectionBudget(),
        )
    raise UnsupportedDatabase(
        f"unsupported ledger backend {parsed.get_backend_name()!r}: "
        "use sqlite+aiosqlite:///path.db or postgresql+asyncpg://…"
    )


def _postgres_engine(
    url: PostgresUrl,
    schema: str | None,
    connect_timeout: float,
    statement_timeout: float,
    budget: ConnectionBudget,
) -> AsyncEngine:
    connect_args = {**url.connect, **_session_options(connect_timeout, statement_timeout)}
    if url.pooler is Pooler.TRANSACTION:
        # asyncpg's cache and SQLAlchemy's would reuse a statement on whichever server
        # connection the pooler hands out next; SQLAlchemy still names each statement it
        # prepares, so the names must never repeat across clients of one server connection.
        connect_args |= {
            "statement_cache_size": 0,
            "prepared_statement_cache_size": 0,
            "prepared_statement_name_func": _unique_statement_name,
        }
    kept = min(_SQLALCHEMY_KEPT, budget.engine_size)
    engine = create_async_engine(
        url.url,
        connect_args=connect_args,
        pool_size=kept,
        max_overflow=budget.engine_size - kept,
        pool_timeout=budget.wait_seconds,
    )
    # Tables are named with their schema in every statement, never found through a
    # `search_path` set at connection start: a pooler refuses or drops startup parameters.
    return engine.execution_options(schema_translate_map=schema_map(schema))


def schema_map(schema: str | None) -> dict[str | None, str | None] | None:
    """The `schema_translate_map` that puts the ledger's tables in `schema`."""
    return None if schema is None else {None: schema}


def _unique_statement_name() -> str:
    return f"__writesafe_{uuid4().hex}__"


def postgres_connect_options(
    url: str | URL,
    *,
    connect_timeout: float = 5.0,
    statement_timeout: float = _STATEMENT_TIMEOUT,
) -> dict[str, Any]:
    """`asyncpg.connect` keyword arguments for the connections `create_engine` would open."""
    parsed = postgres_url(url)
    options = {
        **parsed.url.translate_connect_args(username="user", database="database"),
        **parsed.connect,
        **_session_options(connect_timeout, statement_timeout),
    }
    if parsed.pooler is Pooler.TRANSACTION:
        options["statement_cache_size"] = 0
    return options


def _session_options(connect_timeout: float, statement_timeout: float) -> dict[str, Any]:
    return {"timeout": connect_timeout, "command_timeout": statement_timeout}


def _sqlite_engine(url: URL) -> AsyncEngine:
    engine = create_async_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT})
    _configure_sqlite(engine.sync_engine)
    return engine


def sqlite_file(url: str | URL) -> Path:
    """The file of a SQLite ledger URL, as an absolute path: the one name of it that the
    writer's own `sqlite3` connections, the restore mark beside it, the reconciler's lock and the
    CLI all use (`Ledger.file`), so that none of them works out a different file."""
    database = make_url(url).database
    if not database or database == ":memory:":
        raise UnsupportedDatabase("the embedded ledger needs a file: sqlite+aiosqlite:///path.db")
    return Path(database).resolve()


def connect_sqlite(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """A `sqlite3` connection to the ledger's file, configured as the engine's connections are."""
    connection = sqlite3.connect(
        path, timeout=SQLITE_BUSY_TIMEOUT, check_same_thread=check_same_thread
    )
    configure_sqlite_connection(connection)
    return connection


def configure_sqlite_connection(
    dbapi_connection: Any, sleep: Callable[[float], None] = time.sleep
) -> None:
    """WAL, durable commits, foreign keys and a busy wait, on a new driver connection; `sleep`
    makes the waits for another connection's switch to WAL (`_switch_to_wal`)."""
    # Take transaction control from the driver, so that each transaction begins as we say
    # (the engine's: IMMEDIATE for a write, deferred for a read; the writer's: IMMEDIATE).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    _switch_to_wal(cursor, sleep)
    # FULL: a committed intent survives power loss, which is the whole point of recording it.
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
    cursor.close()


# The sleeps between tries of the switch to WAL: short, as the lock is held briefly, at random so
# that instances opening a new file together do not try again in step.
_WAL_RETRY_WAIT = wait_random_exponential(multiplier=1e-3, max=0.05)


def _switch_to_wal(cursor: Any, sleep: Callable[[float], None]) -> None:
    """Put a file that is not in WAL yet into it (WAL is kept in the file). The switch takes the
    file's write lock, and SQLite refuses it at once, with no busy wait, while another connection
    holds that lock: instances opening a new file together would refuse one another. So it is
    tried again after short sleeps, reading the mode each time, as another may have switched."""
    retrying = Retrying(
        stop=stop_after_delay(SQLITE_BUSY_TIMEOUT),
        wait=_WAL_RETRY_WAIT,
        retry=retry_if_exception(is_busy),
        sleep=sleep,
        reraise=True,
    )
    for attempt in retrying:
        with attempt:
            cursor.execute("PRAGMA journal_mode")
            if cursor.fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        configure_sqlite_connection(dbapi_connection, _sleep_on_the_loop(dbapi_connection))

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # A deferred transaction that reads then writes fails with SQLITE_BUSY instead of waiting;
        # taking the write lock up front makes claims queue behind each other. One that only
        # reads (`reader`) needs no lock a writer holds (WAL), so it takes none; it keeps the
        # busy wait for the brief locks a WAL reader can meet (a recovery, a last close).
        options = conn.get_execution_options()
        if options.get(_READ_ONLY, False):
            _set_busy_wait(conn, _BUSY_TIMEOUT_MS)
            conn.exec_driver_sql("BEGIN")
            return
        _set_busy_wait(conn, _TRY_MS)
        _begin_immediate(conn, options.get(_LOCK_WAIT, SQLITE_BUSY_TIMEOUT))


def _begin_immediate(conn: Any, lock_wait: float) -> None:
    """BEGIN IMMEDIATE, waiting about `lock_wait` seconds for the write lock in tries of
    `_TRY_MS`. SQLite's busy wait is the cheapest wait there is (its thread sleeps and tries the
    lock again), but a thread in it waits out its whole timeout whatever its caller does (not
    even `sqlite3`'s interrupt() ends it): a cancelled write left the driver's thread waiting for
    30 s, and a ledger closed meanwhile left it behind to answer a loop that had ended. A try
    ends within `_TRY_MS`, and the close waits for that. On the driver's own cursor, so a busy
    try costs no more (through SQLAlchemy it is also rolled back); what it finally raises is
    raised as SQLAlchemy raises a statement's error, which every caller of the ledger expects."""
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        try:  # the lock free within a try, as nearly always: no retry policy is built
            cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
            retrying = Retrying(
                stop=stop_after_delay(max(lock_wait - _TRY_MS / 1000, 0)),
                retry=retry_if_exception(is_busy),
                reraise=True,
            )
            for attempt in retrying:
                with attempt:
                    cursor.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as error:
        raise DBAPIError.instance("BEGIN IMMEDIATE", None, error, sqlite3.Error) from error
    finally:
        cursor.close()


def _sleep_on_the_loop(driver: Any) -> Callable[[float], None]:
    """A sleep for the engine's connect hook: it runs on the event loop (in SQLAlchemy's
    greenlet), so it sleeps there, and a cancelled task's sleep ends at once."""

    def sleep(seconds: float) -> None:
        driver.run_async(lambda _: asyncio.sleep(seconds))

    return sleep


def _set_busy_wait(conn: Any, milliseconds: int) -> None:
    """SQLite's busy wait on `conn`, set only where it is not already: a pooled connection that
    serves writes alone, or reads alone, makes no statement for it."""
    info = conn.connection.info
    if info.get(_BUSY_WAIT, _BUSY_TIMEOUT_MS) != milliseconds:
        conn.exec_driver_sql(f"PRAGMA busy_timeout={milliseconds}")
        info[_BUSY_WAIT] = milliseconds


def reader(engine: AsyncEngine) -> AsyncEngine:
    """`engine` for transactions that only read. On SQLite they begin deferred: a WAL reader
    neither waits for the writers nor holds them up, where a transaction begun `IMMEDIATE` takes
    the write lock for as long as it lasts. No write goes through it: a deferred transaction that
    turns to writing may fail with SQLITE_BUSY instead of waiting for the lock."""
    return engine.execution_options(**{_READ_ONLY: True})


def with_lock_wait(engine: AsyncEngine, seconds: float) -> AsyncEngine:
    """`engine` for writes that wait at most `seconds` for SQLite's write lock (any other waits
    `SQLITE_BUSY_TIMEOUT`). Nothing changes on PostgreSQL, where cancelling ends a wait."""
    return engine.execution_options(**{_LOCK_WAIT: seconds})


def is_busy(error: BaseException) -> bool:
    """SQLite's answer that another connection holds the lock."""
    return (
        isinstance(error, sqlite3.OperationalError)
        and error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
    )
