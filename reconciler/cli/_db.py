"""`writesafe db upgrade|current|downgrade`: the ledger's schema, by its migrations."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from sqlalchemy.schema import CreateSchema

from idempotency import WriteSafe
from ledger import current_revision, downgrade, head_revision
from reconciler.cli._exit import ExitCode
from reconciler.cli._loading import app_or_settings
from reconciler.cli._options import AppOption, DatabaseUrlOption, SchemaOption
from reconciler.cli._runner import run

db_app = typer.Typer(help="Manage the ledger's database schema.", no_args_is_help=True)
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

    async def migrate(ws: WriteSafe) -> None:
        name = ws.settings.db_schema
        if name and not ws.ledger.is_sqlite:
            async with ws.ledger.engine.begin() as connection:
                await connection.execute(CreateSchema(name, if_not_exists=True))
        await ws.ledger.migrate()

    run(ws, migrate, may_create=True)
    Console().print(f"ledger schema at {head_revision()}")


@db_app.command("current")
def current(
    app: AppOption = None, database_url: DatabaseUrlOption = None, schema: SchemaOption = None
) -> None:
    """Show the ledger's schema revision and the one this writesafe needs (exit 1: behind)."""
    ws = app_or_settings(app, database_url, schema)
    revision = run(ws, lambda ws: current_revision(ws.ledger.engine))
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
    """Undo migrations down to REVISION (their tables and data go with them)."""
    ws = app_or_settings(app, database_url, schema)
    run(ws, lambda ws: downgrade(ws.ledger.engine, revision))
    now = run(
        app_or_settings(app, database_url, schema), lambda ws: current_revision(ws.ledger.engine)
    )
    Console().print(f"ledger schema at {now or 'nothing'}")
