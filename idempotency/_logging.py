"""The `writesafe` logger's operation context, and structured JSON logs as an option.

While a guarded call or a lookup runs, a context variable names its operation; `OperationFilter`
copies it onto every record as `writesafe_key`, `writesafe_scope` and `writesafe_tool` (None
outside an operation, e.g. a reconciliation batch's summary). `configure_logging(json=True)` puts
one JSON object per line on stderr with those fields (python-json-logger's formatter, imported
only when JSON is asked for).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TextIO, TypeVar

if TYPE_CHECKING:
    from writesafe.idempotency._spec import GuardedCall

LOGGER = "writesafe"
FIELDS = ("writesafe_key", "writesafe_scope", "writesafe_tool")

_operation: ContextVar[tuple[str, str, str] | None] = ContextVar(
    "writesafe_log_operation", default=None
)
P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


@contextlib.contextmanager
def operation_logged(key: str, scope: str, tool: str) -> Iterator[None]:
    """Name this operation on every `writesafe` log record made inside the block."""
    token = _operation.set((key, scope, tool))
    try:
        yield
    finally:
        _operation.reset(token)


def logged_call(
    run: Callable[Concatenate[S, GuardedCall, P], Awaitable[R]],
) -> Callable[Concatenate[S, GuardedCall, P], Awaitable[R]]:
    """Decorate `Guard.run`: the call's operation is named on its log lines."""

    @functools.wraps(run)
    async def wrapper(guard: S, call: GuardedCall, /, *args: P.args, **kwargs: P.kwargs) -> R:
        # `operation_logged` inlined: a generator context manager is five Python calls.
        token = _operation.set((call.key, call.scope, call.tool.name))
        try:
            return await run(guard, call, *args, **kwargs)
        finally:
            _operation.reset(token)

    return wrapper


class OperationFilter(logging.Filter):
    """Adds the running operation's key, scope and tool to each record (never drops one); a
    record that names its operation itself (`extra=`, e.g. a lookup's answer) keeps it."""

    def filter(self, record: logging.LogRecord) -> bool:
        running = _operation.get()
        if running is None and getattr(record, "writesafe_key", None) is not None:
            return True
        key, scope, tool = running or (None, None, None)
        record.writesafe_key, record.writesafe_scope, record.writesafe_tool = key, scope, tool
        return True


def configure_logging(
    *, json: bool = False, level: int | str = logging.INFO, stream: TextIO | None = None
) -> logging.Handler:
    """Send the `writesafe` logger's records to `stream` (stderr), as JSON lines or as text;
    returns the handler (remove it from `logging.getLogger("writesafe")` to undo). Calling it
    again replaces the handler it added before."""
    logger = logging.getLogger(LOGGER)
    for existing in logger.handlers:
        if getattr(existing, "_writesafe", False):
            logger.removeHandler(existing)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(OperationFilter())
    handler.setFormatter(_json_formatter() if json else _text_formatter())
    handler._writesafe = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler


def _text_formatter() -> logging.Formatter:
    return logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s [%(writesafe_scope)s/%(writesafe_key)s "
        "%(writesafe_tool)s] %(message)s"
    )


def _json_formatter() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    # Named in the format, the operation's fields are written even when None.
    fields = " ".join(f"%({name})s" for name in FIELDS)
    formatter: logging.Formatter = JsonFormatter(
        f"%(asctime)s %(levelname)s %(name)s %(message)s {fields}",
        rename_fields={
            "asctime": "time",
            "levelname": "level",
            "name": "logger",
            **{name: name.removeprefix("writesafe_") for name in FIELDS},
        },
    )
    return formatter
