"""`writesafe db upgrade|current|downgrade` manage the migrations; `writesafe db prune` applies
retention."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Annotated

import typer
from rich.console import Console

from writesafe.cli._exit import ExitCode
from writesafe.cli._loading import app_or_settings, fail
from writesafe.cli._options import AppOption, DatabaseUrlOption, JsonOption, SchemaOption
from writesafe.cli._restored import restored
from writesafe.cli._runner import run
from writesafe.idempotency import WriteSafe
from writesafe.ledger import (
    DEFAULT_BATCH_SIZE,
    PruneReport,
    head_revision,
    prune,
    revisions,
)

db_app = typer.Typer(help="Manage the ledger's schema and retention.", no_args_is_help=True)
RevisionArgument = Annotated[
    str, typer.Argument(help="The revision to go back to (e.g. 0001), or `base` for none.")
]


@db_app.command("upgrade")
def upgrade(
    app: AppOption = None, database_url: DatabaseUrlOption = None, schema: SchemaOption = None
) -> None:
    """Create or upgrade the ledger's tables to the newest migration (safe to run again); a
    PostgreSQL schema that does not exist yet is created."""
    ws = app_or_settings(app, database_url, schema)
    run(ws, lambda ws: ws.ledger.migrate(), may_create=True)
    Console().print(f"ledger schema at {head_revision()}")


@db_app.command("current")
def current(
    app: AppOption = None, database_url: DatabaseUrlOption = None, schema: SchemaOption = None
) -> None:
    """Show the ledger's schema revision and the one this writesafe needs (exit 1: behind)."""
    ws = app_or_settings(app, database_url, schema)
    revision = run(ws, lambda ws: ws.ledger.revision())
    head = head_revision()
    if revision == head:
        Console().print(f"ledger schema at {head} (current)")
        return
    Console().print(
        f"ledger schema at {revision or 'nothing'}, this writesafe needs {head}: "
        "run `writesafe db upgrade`"
    )
    raise typer.Exit(int(ExitCode.FAILED))


@db_app.command("downgrade")
def downgrade_command(
    revision: RevisionArgument,
    app: AppOption = None,
    database_url: DatabaseUrlOption = None,
    schema: SchemaOption = None,
) -> None:
    """Undo migrations down to REVISION (their tables and data go with them). Exit 2 if REVISION
    is not one of the ledger's migrations."""
    known = ["base", *revisions()]
    if revision not in known:
        message = f"REVISION: {revision!r} is not a migration; one of {', '.join(known)}"
        raise fail(message, ExitCode.USAGE)
    ws = app_or_settings(app, database_url, schema)
    run(ws, lambda ws: ws.ledger.downgrade(revision))
    now = run(app_or_settings(app, database_url, schema), lambda ws: ws.ledger.revision())
    Console().print(f"ledger schema at {now or 'nothing'}")


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
    int,
    typer.Option("--batch-size", min=1, help="Operations (or tombstones) deleted per transaction."),
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
    short batches; never in_flight, outcome_unknown or needs_attention ones. A pruned key is new.
    Then tombstones older than WRITESAFE_TOMBSTONE_RETENTION (7 days): those keys are never seen."""
    ws = app_or_settings(app, database_url, schema)
    retention = timedelta(seconds=ws.settings.retention if older_than is None else older_than)

    async def pruned(ws: WriteSafe) -> PruneReport:
        await ws.ledger.check_schema()
        return await prune(
            ws.ledger,
            retention,
            tombstone_retention=timedelta(seconds=ws.settings.tombstone_retention),
            batch_size=batch_size,
        )

    report = run(ws, pruned)
    if as_json:
        Console().print_json(json.dumps(prune_summary(report)))
    else:
        Console().print(
            f"pruned {report.operations} operations and {report.attempts} attempts "
            f"last changed before {report.cutoff:%Y-%m-%d %H:%M:%S} UTC, and "
            f"{report.tombstones} tombstones of keys pruned over "
            f"{ws.settings.tombstone_retention:g}s ago "
            f"({report.batches} batches, {report.seconds:.2f}s)",
            highlight=False,
        )


def prune_summary(report: PruneReport) -> dict[str, object]:
    """The report as JSON-ready values (also what `reconcile --watch --json` prints)."""
    return {
        "pruned_operations": report.operations,
        "pruned_attempts": report.attempts,
        "pruned_tombstones": report.tombstones,
        "batches": report.batches,
        "seconds": round(report.seconds, 3),
        "cutoff": None if report.cutoff is None else report.cutoff.isoformat(),
    }


db_app.command("restored")(restored)
