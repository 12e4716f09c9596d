"""Which `LedgerCause` a ledger failure is: a pure function of the exception and its chain."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import asyncpg
from sqlalchemy.exc import TimeoutError as PoolTimeout

from writesafe.ledger import LedgerNotMigrated, UnsupportedDatabase
from writesafe.reconciler._causes import LedgerCause
from writesafe.reconciler._redaction import redact_text

# How much of the driver's message the log keeps.
DETAIL_LIMIT = 500

# SQLSTATEs (or their two-character classes) and what they say about the ledger.
_BY_SQLSTATE: dict[str, LedgerCause] = {
    "53300": LedgerCause.BUSY,  # too many connections
    "57P03": LedgerCause.BUSY,  # cannot connect now (starting up, or at its limit)
    "55P03": LedgerCause.BUSY,  # lock not available
    "57014": LedgerCause.BUSY,  # statement timeout or cancelled
    "40": LedgerCause.BUSY,  # serialization failure, deadlock: a retry can succeed
    "57P01": LedgerCause.UNREACHABLE,  # the server is shutting down
    "57P02": LedgerCause.UNREACHABLE,  # the server crashed
    "08": LedgerCause.UNREACHABLE,  # connection exceptions
    "26000": LedgerCause.MISCONFIGURED,  # prepared statement gone: a pooler in between
    "42P05": LedgerCause.MISCONFIGURED,  # prepared statement exists: a pooler in between
    "42P01": LedgerCause.MISCONFIGURED,  # no such table: not migrated, or the wrong schema
    "3F000": LedgerCause.MISCONFIGURED,  # no such schema
    "3D000": LedgerCause.MISCONFIGURED,  # no such database
    "42501": LedgerCause.MISCONFIGURED,  # permission denied
    "28": LedgerCause.MISCONFIGURED,  # authentication failed
}

# asyncpg's words for a connection asked to start a statement while another is in progress.
_STUCK = "another operation"

# PgBouncer reports its own refusals as protocol violations (08P01); the message says which.
_POOLER_MESSAGES: tuple[tuple[str, LedgerCause], ...] = (
    ("no more connections allowed", LedgerCause.BUSY),
    ("query_wait_timeout", LedgerCause.BUSY),
    ("unsupported startup parameter", LedgerCause.MISCONFIGURED),
    ("prepared statement", LedgerCause.MISCONFIGURED),  # "bind message supplies 21 parameters…"
)


@dataclass(frozen=True, slots=True)
class LedgerFailure:
    """A ledger failure as the guard reports it: its cause, and the driver's words (redacted)
    for the log."""

    cause: LedgerCause
    detail: str


def ledger_failure(error: BaseException) -> LedgerFailure:
    """Classify `error`; the innermost exception in its chain that says something decides."""
    chain = _chain(error)
    for link in reversed(chain):
        cause = _cause_of(link)
        if cause is not None:
            return LedgerFailure(cause, _detail(link))
    return LedgerFailure(LedgerCause.STATEMENT, _detail(chain[-1]))


def _cause_of(error: BaseException) -> LedgerCause | None:
    if isinstance(error, PoolTimeout):
        return LedgerCause.BUDGET
    if isinstance(error, LedgerNotMigrated | UnsupportedDatabase):
        return LedgerCause.MISCONFIGURED
    if isinstance(error, asyncpg.PostgresError):
        return _postgres_cause(str(error.sqlstate or ""), str(error))
    if isinstance(error, asyncpg.InternalClientError) and _STUCK in str(error):
        # "cannot switch to state 12; another operation (2) is in progress": the connection is
        # still taking in an error (its backend was ended: a FATAL arrived while it sat idle)
        # whose end will never come. Nothing shares a connection here, so it is a lost one.
        return LedgerCause.UNREACHABLE
    if isinstance(error, asyncpg.InterfaceError):
        # A client-side refusal: the connection is closed, or it is used wrongly.
        closed = "closed" in str(error) or "connection" in str(error)
        return LedgerCause.UNREACHABLE if closed else LedgerCause.STATEMENT
    if isinstance(error, sqlite3.Error):
        return _sqlite_cause(str(error))
    if isinstance(error, OSError | TimeoutError):
        return LedgerCause.UNREACHABLE
    return None


def _postgres_cause(sqlstate: str, message: str) -> LedgerCause:
    if sqlstate == "08P01":
        for words, cause in _POOLER_MESSAGES:
            if words in message:
                return cause
    return _BY_SQLSTATE.get(sqlstate) or _BY_SQLSTATE.get(sqlstate[:2]) or LedgerCause.STATEMENT


# What the embedded ledger's driver says, and what it means.
_SQLITE_MESSAGES: tuple[tuple[str, LedgerCause], ...] = (
    ("database is locked", LedgerCause.BUSY),
    ("no such table", LedgerCause.MISCONFIGURED),
    ("no such column", LedgerCause.MISCONFIGURED),
    ("unable to open database file", LedgerCause.UNREACHABLE),
    ("disk I/O error", LedgerCause.UNREACHABLE),
)


def _sqlite_cause(message: str) -> LedgerCause:
    for words, cause in _SQLITE_MESSAGES:
        if words in message:
            return cause
    return LedgerCause.STATEMENT


def _chain(error: BaseException) -> list[BaseException]:
    """`error`, then what it wraps (SQLAlchemy's `.orig`, then `__cause__`), outermost first."""
    chain: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and link not in chain:
        chain.append(link)
        orig = getattr(link, "orig", None)
        link = orig if isinstance(orig, BaseException) else link.__cause__
    return chain


def _detail(error: BaseException) -> str:
    # Only the driver's words are redacted: a class name such as `InvalidPasswordError` reads
    # as a key-like `name: value` pair and would take the whole message with it.
    return f"{type(error).__name__}: {redact_text(str(error))}"[:DETAIL_LIMIT]
