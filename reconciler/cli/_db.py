"""`writesafe db upgrade` applies the migrations; `writesafe db prune` applies retention."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Annotated

import typer
from rich.console import Console

from ledger import DEFAULT_BATCH_SIZE, LedgerNotMigrated, PruneReport, head_revision, prune
from reconciler.cli._exit import ExitCode
from reconciler.cli._loading import app_or_settings, fail
from reconciler.cli._options import AppOption, DatabaseUrlOption, JsonOption, SchemaOption
from reconciler.cli._stores import unavailable_errors

db_app = typer.Typer(help="Manage the ledger's schema and retention.", no_args_is_help=True)


@db_app.command("upgrade")
def upgrade(
    app: AppOption = None, database_url: DatabaseUrlOption = None, schema: SchemaOption = None
) -> None:
    """Create or upgrade the ledger's tables to the newest migration (safe to run again)."""
    ws = app_or_settings(app, database_url, schema)

    async def run() -> None:
        try:
            await ws.ledger.migrate()
        finally:
            await ws.close()

    try:
        asyncio.run(run())
    except unavailable_errors() as error:
        raise fail(f"the database could not be reached: {error}", ExitCode.UNAVAILABLE) from error
    Console().print(f"ledger schema at {head_revision()}")


OlderThanOption = Annotated[
    float | None,
    typer.Option(
        "--older-than",
        min=0.001,
        help="Prune final operations last changed at least S seconds ago "
        "(default: the retention setting, WRITESAFE_RETENTION, 24 h).",
    ),
]
BatchOption = Annotated[
    int, typer.Option("--batch-size", min=1, help="Operations deleted per transaction.")
]


@db_app.command("prune")
def prune_command(
    app: AppOption = None,
    database_url: DatabaseUrlOption = None,
    schema: SchemaOption = None,
    older_than: OlderThanOption = None,
    batch_size: BatchOption = DEFAULT_BATCH_SIZE,
    as_json: JsonOption = False,
) -> None:
    """Delete succeeded and failed operations past the retention period, with their attempts, in
    short batches; never in_flight, outcome_unknown or needs_attention ones. A pruned key is new."""
    ws = app_or_settings(app, database_url, schema)
    retention = timedelta(seconds=ws.settings.retention if older_than is None else older_than)

    async def run() -> PruneReport:
        try:
            await ws.ledger.check_schema()
            return await prune(ws.ledger, retention, batch_size=batch_size)
        finally:
            await ws.close()

    try:
        report = asyncio.run(run())
    except LedgerNotMigrated as error:
        raise fail(str(error), ExitCode.FAILED) from error
    except unavailable_errors() as error:
        raise fail(f"the database could not be reached: {error}", ExitCode.UNAVAILABLE) from error
    if as_json:
        Console().print_json(json.dumps(prune_summary(report)))
    else:
        Console().print(
            f"pruned {report.operations} operations and {report.attempts} attempts "
            f"last changed before {report.cutoff:%Y-%m-%d %H:%M:%S} UTC "
            f"({report.batches} batches, {report.seconds:.2f}s)",
            highlight=False,
        )


def prune_summary(report: PruneReport) -> dict[str, object]:
    """The report as JSON-ready values (also what `reconcile --watch --json` prints)."""
    return {
        "pruned_operations": report.operations,
        "pruned_attempts": report.attempts,
        "batches": report.batches,
        "seconds": round(report.seconds, 3),
        "cutoff": None if report.cutoff is None else report.cutoff.isoformat(),
    }
