"""What a ledger failure is called (a table of real driver errors), the URL options the ledger
takes, and the CLI's one line for every URL mistake."""

from __future__ import annotations

import sqlite3

import asyncpg
import pytest
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from typer.testing import CliRunner

from writesafe import WriteSafe
from writesafe.cli import app
from writesafe.ledger import LedgerNotMigrated, UnsupportedDatabase
from writesafe.ledger._engine import Pooler, postgres_url
from writesafe.reconciler._causes import LedgerCause
from writesafe.reconciler._ledger_causes import ledger_failure


def _pg(error_class: type[asyncpg.PostgresError], message: str = "") -> asyncpg.PostgresError:
    return error_class(message)


def _wrapped(error: BaseException) -> OperationalError:
    """As the ledger raises a driver error: SQLAlchemy's, with the driver's as its origin."""
    return OperationalError("SELECT 1", None, error)


CASES: list[tuple[str, BaseException, LedgerCause]] = [
    (
        "connection refused",
        ConnectionRefusedError(111, "Connection refused"),
        LedgerCause.UNREACHABLE,
    ),
    ("connect timed out", TimeoutError(), LedgerCause.UNREACHABLE),
    ("terminated backend", _wrapped(_pg(asyncpg.AdminShutdownError)), LedgerCause.UNREACHABLE),
    (
        "connection gone",
        _wrapped(_pg(asyncpg.ConnectionDoesNotExistError, "connection was closed")),
        LedgerCause.UNREACHABLE,
    ),
    (
        # A connection reused while it still takes in the FATAL of its ended backend (seen in
        # the chaos run after pg_terminate_backend): an outage, not a defect to hand off.
        "ended backend, reused",
        _wrapped(
            asyncpg.InternalClientError(
                "cannot switch to state 12; another operation (2) is in progress"
            )
        ),
        LedgerCause.UNREACHABLE,
    ),
    ("too many clients", _wrapped(_pg(asyncpg.TooManyConnectionsError)), LedgerCause.BUSY),
    (
        "pooler full",
        _wrapped(
            _pg(asyncpg.ProtocolViolationError, "no more connections allowed (max_client_conn)")
        ),
        LedgerCause.BUSY,
    ),
    ("deadlock", _wrapped(_pg(asyncpg.DeadlockDetectedError)), LedgerCause.BUSY),
    ("statement timeout", _wrapped(_pg(asyncpg.QueryCanceledError)), LedgerCause.BUSY),
    ("SQLite locked", sqlite3.OperationalError("database is locked"), LedgerCause.BUSY),
    ("own budget used up", PoolTimeout("QueuePool limit reached"), LedgerCause.BUDGET),
    ("bad statement", _wrapped(_pg(asyncpg.SyntaxOrAccessError)), LedgerCause.STATEMENT),
    ("SQLite constraint", sqlite3.IntegrityError("CHECK failed"), LedgerCause.STATEMENT),
    ("nothing said", RuntimeError("?"), LedgerCause.STATEMENT),
    ("driver defect", _wrapped(asyncpg.InternalClientError("?")), LedgerCause.STATEMENT),
    (
        "not migrated",
        ProgrammingError("SELECT", None, _pg(asyncpg.UndefinedTableError)),
        LedgerCause.MISCONFIGURED,
    ),
    ("no schema", _wrapped(_pg(asyncpg.InvalidSchemaNameError)), LedgerCause.MISCONFIGURED),
    ("no database", _wrapped(_pg(asyncpg.InvalidCatalogNameError)), LedgerCause.MISCONFIGURED),
    ("wrong password", _wrapped(_pg(asyncpg.InvalidPasswordError)), LedgerCause.MISCONFIGURED),
    ("behind head", LedgerNotMigrated("at 0003"), LedgerCause.MISCONFIGURED),
    (
        "statement cached across a pooler",
        _wrapped(_pg(asyncpg.DuplicatePreparedStatementError)),
        LedgerCause.MISCONFIGURED,
    ),
    (
        "statement gone behind a pooler",
        _wrapped(_pg(asyncpg.InvalidSQLStatementNameError)),
        LedgerCause.MISCONFIGURED,
    ),
    (
        "another client's statement",
        _wrapped(
            _pg(
                asyncpg.ProtocolViolationError,
                'bind message supplies 21 parameters, but prepared statement "__asyncpg_stmt_11__"'
                " requires 3",
            )
        ),
        LedgerCause.MISCONFIGURED,
    ),
    (
        "startup parameter refused",
        _pg(asyncpg.ProtocolViolationError, "unsupported startup parameter: search_path"),
        LedgerCause.MISCONFIGURED,
    ),
    (
        "SQLite not migrated",
        sqlite3.OperationalError("no such table: x"),
        LedgerCause.MISCONFIGURED,
    ),
]


@pytest.mark.parametrize(("error", "cause"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_ledger_failure_has_its_cause(error: BaseException, cause: LedgerCause) -> None:
    assert ledger_failure(error).cause is cause


def test_only_an_outage_or_a_crowd_is_retryable() -> None:
    retryable = {cause for cause in LedgerCause if cause.retryable}
    assert retryable == {LedgerCause.UNREACHABLE, LedgerCause.BUSY, LedgerCause.BUDGET}


def test_the_logged_detail_is_the_drivers_message_redacted() -> None:
    error = _wrapped(
        _pg(asyncpg.InvalidPasswordError, "refused postgresql://admin:hunter2@db.internal/ledger")
    )
    detail = ledger_failure(error).detail
    assert detail.startswith("InvalidPasswordError: ")
    assert "db.internal/ledger" in detail
    assert "hunter2" not in detail


BASE = "postgresql+asyncpg://u@h/db"


def test_url_options_reach_the_driver_as_its_types() -> None:
    parsed = postgres_url(
        f"{BASE}?pooler=transaction&statement_cache_size=0&sslmode=require&application_name=a"
    )
    assert parsed.pooler is Pooler.TRANSACTION
    assert dict(parsed.connect) == {
        "statement_cache_size": 0,
        "ssl": "require",
        "server_settings": {"application_name": "a"},
    }
    assert parsed.url.query == {}


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("statement_cache_size=many", "is not a whole number"),
        ("sslmode=sometimes", "is not one of"),
        ("pooler=statement", "is not one of"),
        ("search_path=x", "unknown database URL option 'search_path'"),
        ("ssl=require&ssl=disable", "more than once"),
    ],
)
def test_a_bad_url_option_is_refused_naming_it(query: str, says: str) -> None:
    with pytest.raises(UnsupportedDatabase, match=says):
        postgres_url(f"{BASE}?{query}")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@h/db",  # the commonest mistake: the sync driver
        "mysql+aiomysql://u@h/db",
        f"{BASE}?statement_cache_size=x",
        f"{BASE}?nope=1",
        "not a url",
    ],
)
def test_every_url_mistake_is_one_line_and_exit_2(url: str) -> None:
    result = CliRunner().invoke(app, ["db", "current", "--database-url", url])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --database-url: ")
    assert result.output.count("\n") == 1


@pytest.mark.parametrize("schema", ["", "s" * 64, "é" * 32])
def test_a_schema_postgresql_cannot_name_is_refused_before_a_connection(schema: str) -> None:
    """Empty, or longer than PostgreSQL's 63 bytes (which it would cut short), refused at once:
    not the driver's syntax error, nor SQLAlchemy's, when the ledger first starts."""
    with pytest.raises(UnsupportedDatabase, match="schema= must be a PostgreSQL name of 1 to 63"):
        WriteSafe(BASE, schema=schema)
    result = CliRunner().invoke(app, ["db", "upgrade", "--database-url", BASE, "--schema", schema])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1
    assert result.output.startswith("error: --schema: schema= must be")
