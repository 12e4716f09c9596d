"""`writesafe db upgrade`: apply the ledger's migrations."""

from __future__ import annotations

import asyncio

import typer
from rich.console import Console

from ledger import head_revision
from reconciler.cli._exit import ExitCode
from reconciler.cli._loading import app_or_settings, fail
from reconciler.cli._options import AppOption, DatabaseUrlOption, SchemaOption
from reconciler.cli._stores import unavailable_errors

db_app = typer.Typer(help="Manage the ledger's database schema.", no_args_is_help=True)


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
