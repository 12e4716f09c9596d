"""One way to run a command on a `WriteSafe`: open, run, close, every error one line and its code.

Each command hands its work to `run`; none of them opens, closes or maps errors on its own, so a
new failure mode is mapped here once and no command can end in a traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import typer

from writesafe.cli._exit import ExitCode
from writesafe.cli._loading import fail
from writesafe.cli._stores import unavailable_errors
from writesafe.idempotency import (
    OperationNotFound,
    ReconcilerBusy,
    ResolutionRefused,
    WriteSafe,
    WriteSafeError,
)
from writesafe.ledger import LedgerNotMigrated, mark_path
from writesafe.reconciler import ledger_failure

T = TypeVar("T")

# Envelope codes that mean "a store could not be reached" or "the arguments are wrong".
_UNAVAILABLE_CODES = {"TEMP_UNAVAILABLE", "DEPENDENCY_BUSY"}
_USAGE_CODES = {"INPUT_INVALID", "KEY_REUSED"}
_REFUSALS = (ResolutionRefused, ReconcilerBusy, LedgerNotMigrated)
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def run(
    ws: WriteSafe, action: Callable[[WriteSafe], Awaitable[T]], *, may_create: bool = False
) -> T:
    """Run `action(ws)` on a fresh event loop and close `ws`, whatever happens.

    A SQLite ledger that is not there is reported, never created, unless `may_create` (the
    commands that write: `db upgrade`, `keys create`, `serve`); even then a command that fails
    removes the ledger files it created, so no empty ledger is left behind.
    """
    path = ws.ledger.file
    missing = path is not None and not path.exists()
    if missing and not may_create:
        raise fail(
            f"no ledger at {path} ({_url(ws)}); nothing was created. Run from your application's "
            "directory, pass --database-url, or create it with `writesafe db upgrade`",
            ExitCode.UNAVAILABLE,
        )

    async def main() -> T:
        try:
            return await action(ws)
        finally:
            await ws.close()

    try:
        return asyncio.run(main())
    except BaseException as error:
        if missing and path is not None:
            sides = (path.with_name(path.name + s) for s in _SQLITE_SIDE_FILES)
            for created in (path, mark_path(path), *sides):
                created.unlink(missing_ok=True)
        if isinstance(error, typer.Exit | KeyboardInterrupt) or not isinstance(error, Exception):
            raise
        message, code = explain(error, ws)
        raise fail(message, code) from error


def explain(error: Exception, ws: WriteSafe) -> tuple[str, ExitCode]:
    """The one line and the exit code for an error a command on `ws` ended with."""
    unreachable = f"the ledger at {_url(ws)} could not be reached"
    if isinstance(error, OperationNotFound):
        return str(error), ExitCode.NOT_FOUND
    if isinstance(error, _REFUSALS):
        return str(error), ExitCode.FAILED
    if isinstance(error, WriteSafeError):
        envelope = error.envelope
        if envelope.code in _UNAVAILABLE_CODES:
            return f"{unreachable} ({envelope.code})", ExitCode.UNAVAILABLE
        if envelope.code in _USAGE_CODES:
            return envelope.message, ExitCode.USAGE
        return f"{envelope.code}: {envelope.message}", ExitCode.FAILED
    if isinstance(error, unavailable_errors()):
        cause = ledger_failure(error).cause
        if cause.retryable:
            return f"{unreachable} ({cause}): {first_line(error)}", ExitCode.UNAVAILABLE
        # A mistake, not an outage: trying again later will not help.
        return f"the ledger at {_url(ws)} failed ({cause}): {first_line(error)}", ExitCode.FAILED
    return f"{type(error).__name__}: {first_line(error)}", ExitCode.FAILED


def first_line(error: BaseException) -> str:
    """The first line of an error's text (SQLAlchemy's run to many, with the SQL and a link)."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


def _url(ws: WriteSafe) -> str:
    return ws.ledger.shown_url
