"""`writesafe status KEY`: what happened to an operation."""

from __future__ import annotations

import json

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
    table = Table(title="attempts")
    for column in ("kind", "execution", "outcome", "code", "by", "reason", "started", "finished"):
        table.add_column(column)
    for attempt in found.attempts:
        table.add_row(
            attempt.kind.value,
            str(attempt.execution or ""),
            attempt.outcome or "",
            attempt.code or "",
            attempt.actor or "",  # an operator's resolution: who, and why
            attempt.reason or "",
            attempt.started_at.isoformat(timespec="milliseconds"),
            attempt.finished_at.isoformat(timespec="milliseconds") if attempt.finished_at else "",
        )
    return table
