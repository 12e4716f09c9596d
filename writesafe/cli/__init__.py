"""The `writesafe` command line.

This package is an entry point: it may import `idempotency` (to load the user's `WriteSafe`),
which the rest of `reconciler` must not. Exit codes: see `writesafe.cli._exit.ExitCode`.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

import typer

from writesafe.cli._contract import contract_app
from writesafe.cli._db import db_app
from writesafe.cli._demo import demo
from writesafe.cli._keys import keys_app
from writesafe.cli._reconcile import reconcile
from writesafe.cli._resolve import resolve
from writesafe.cli._serve import serve
from writesafe.cli._status import status

app = typer.Typer(
    name="writesafe",
    help=(
        "Make side-effecting tools safe to call from software that retries.\n\n"
        "Exit codes: 0 ok, 1 failed, 2 usage or app path, 3 store unreachable, 4 key not found."
    ),
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"writesafe {version('writesafe')}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """The options every command shares (the help text is the app's)."""


app.command("demo")(demo)
app.command("status")(status)
app.command("reconcile")(reconcile)
app.command("resolve")(resolve)
app.command("serve")(serve)
app.add_typer(keys_app, name="keys")
app.add_typer(db_app, name="db")
app.add_typer(contract_app, name="contract")


def main() -> None:
    """Console-script entry point."""
    app()
