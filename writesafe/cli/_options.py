"""Options shared by several commands, declared once so their names and help never drift."""

from typing import Annotated

import typer

AppArgument = Annotated[
    str, typer.Argument(help="Your WriteSafe as module:attribute (e.g. myapp.tools:ws).")
]
AppOption = Annotated[
    str | None,
    typer.Option("--app", help="Your WriteSafe as module:attribute (e.g. myapp.tools:ws)."),
]
DatabaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="WRITESAFE_DATABASE_URL",
        help="Ledger URL (sqlite+aiosqlite:///… or postgresql+asyncpg://…); ignored with --app.",
    ),
]
SchemaOption = Annotated[
    str | None,
    typer.Option("--schema", envvar="WRITESAFE_DB_SCHEMA", help="PostgreSQL schema of the ledger."),
]
ScopeOption = Annotated[str, typer.Option("--scope", help="Tenant scope of the key.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for machines.")]
