"""`writesafe status KEY`: what happened to an operation."""

from __future__ import annotations

import json
from datetime import UTC, timedelta

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from writesafe.cli._exit import ExitCode
from writesafe.cli._loading import app_or_settings, fail
from writesafe.cli._options import (
    AppOption,
    DatabaseUrlOption,
    JsonOption,
    SchemaOption,
    ScopeOption,
)
from writesafe.cli._runner import run
from writesafe.idempotency import OperationStatus
from writesafe.reconciler import AttemptView


def status(
    key: str,
    app: AppOption = None,
    scope: ScopeOption = "default",
    database_url: DatabaseUrlOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show an operation's status, result or error, and attempts (exit 4: unknown key)."""
    ws = app_or_settings(app, database_url, schema)
    found = run(ws, lambda ws: ws.status(key, scope=scope))
    if found is None:
        pruned = run(ws, lambda ws: ws.expired(key, scope=scope))
        if pruned is not None:
            message = f"key {key!r} in scope {scope!r} expired: its operation was pruned {pruned}"
            raise fail(message, ExitCode.NOT_FOUND)
        raise fail(f"no operation with key {key!r} in scope {scope!r}", ExitCode.NOT_FOUND)
    console = Console()
    if as_json:
        console.print_json(found.model_dump_json(by_alias=True))
        return
    console.print(_summary(found))
    console.print(_attempts(found))


def _summary(found: OperationStatus) -> Table:
    table = Table(title=f"{found.scope}/{found.key}", show_header=False)
    table.add_row("tool", found.tool)
    table.add_row("status", found.status.value)
    table.add_row("executions", f"{found.executions} of {found.max_executions}")
    if found.error is not None:
        table.add_row("error", f"{found.error.code}: {found.error.message}")
    # JSON as stored and as --json prints it (not a Python repr); Text, so no markup is read.
    table.add_row("result", Text(json.dumps(found.result, ensure_ascii=False)))
    table.add_row("updated", found.updated_at.isoformat())
    return table


def _attempts(found: OperationStatus) -> Table:
    """One row per attempt, readable at 80 columns: the outcome and its code share a column and
    wrap at the space between them, a time shows its date only when the day changes, and the
    who-and-why column (an operator's resolution, a lookup's caller) wraps by words."""
    notes = [_note(attempt) for attempt in found.attempts]
    table = Table(
        title="attempts (UTC)", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    table.add_column("kind", no_wrap=True)
    table.add_column("exec", justify="right", no_wrap=True)
    table.add_column("outcome")
    table.add_column("started", min_width=len("00:00:00.000"))
    table.add_column("took", justify="right", no_wrap=True)
    if any(notes):
        table.add_column("by: reason")
    day = None
    for attempt, note in zip(found.attempts, notes, strict=True):
        started = attempt.started_at.astimezone(UTC)
        time = started.strftime("%H:%M:%S.") + f"{started.microsecond // 1000:03d}"
        at = time if started.date() == day else f"{started.date().isoformat()} {time}"
        day = started.date()
        outcome = " ".join(part for part in (attempt.outcome, attempt.code) if part)
        took = "" if attempt.finished_at is None else _duration(attempt.finished_at - started)
        table.add_row(
            attempt.kind.value,
            str(attempt.execution or ""),
            outcome,
            at,
            took,
            *([note] if any(notes) else []),
        )
    return table


def _note(attempt: AttemptView) -> str:
    """Who acted and why: an operator's name and reason, or the caller of a lookup."""
    return ": ".join(part for part in (attempt.actor, attempt.reason) if part)


def _duration(took: timedelta) -> str:
    """`12ms`, `1.25s`, `3m02s`: short enough for the table's narrowest column."""
    seconds = took.total_seconds()
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s"
