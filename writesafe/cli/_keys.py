"""`writesafe keys create|list|revoke`: the service's API keys (only their hashes are stored)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from writesafe._extras import MissingExtra
from writesafe.cli._exit import ExitCode
from writesafe.cli._loading import app_or_settings, fail
from writesafe.cli._options import AppOption, DatabaseUrlOption, JsonOption, SchemaOption
from writesafe.cli._runner import run
from writesafe.idempotency import WriteSafe
from writesafe.ledger import ApiKeyRecord, ApiKeys, Role

T = TypeVar("T")

keys_app = typer.Typer(
    help="Manage the HTTP service's API keys (each bound to one scope and one role).",
    no_args_is_help=True,
)

KeyScopeOption = Annotated[
    str, typer.Option("--scope", help="The tenant scope the key sees (and only that one).")
]
RoleOption = Annotated[
    Role,
    typer.Option(
        "--role",
        help="reader: read its scope; operator: also reconcile and resolve it; "
        "admin: also every scope's reconciliation and the metrics.",
    ),
]
NameOption = Annotated[str, typer.Option("--name", help="Who or what holds the key (audited).")]


@keys_app.command("create")
def create(
    scope: KeyScopeOption,
    name: NameOption,
    role: RoleOption = Role.READER,
    app: AppOption = None,
    database_url: DatabaseUrlOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a key and print it once: only its SHA-256 is stored, it cannot be shown again."""
    try:
        # The service package loads FastAPI (most of a second): only the commands that need it.
        from writesafe.service import create_api_key
    except MissingExtra as missing:
        raise fail(str(missing), ExitCode.USAGE) from None

    ws = app_or_settings(app, database_url, schema)
    record, token = _run(
        ws, lambda keys: create_api_key(keys, scope=scope, role=role, name=name), writes=True
    )
    if as_json:
        print(json.dumps({**_public(record), "token": token}))
        return
    Console().print(_table([record]))
    Console().print(
        f"\n[bold]{token}[/bold]\n\nStore it now: it is not kept and cannot be shown again."
    )


@keys_app.command("list")
def list_keys(
    scope: Annotated[str | None, typer.Option("--scope", help="Only this scope's keys.")] = None,
    include_revoked: Annotated[bool, typer.Option("--all", help="Include revoked keys.")] = False,
    app: AppOption = None,
    database_url: DatabaseUrlOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """List keys (never their secrets)."""
    ws = app_or_settings(app, database_url, schema)
    records = _run(ws, lambda keys: keys.list(scope=scope, include_revoked=include_revoked))
    if as_json:
        print(json.dumps([_public(r) for r in records]))
        return
    Console().print(_table(records))


@keys_app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key id (the 12 hex digits after wsk_).")],
    app: AppOption = None,
    database_url: DatabaseUrlOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Revoke a key at once (exit 4: no such key). Revoking twice is harmless."""
    ws = app_or_settings(app, database_url, schema)
    record = _run(ws, lambda keys: keys.revoke(key_id))
    if record is None:
        raise fail(f"no API key with id {key_id!r}", ExitCode.NOT_FOUND)
    if as_json:
        print(json.dumps(_public(record)))
        return
    Console().print(_table([record]))


def _run(ws: WriteSafe, action: Callable[[ApiKeys], Awaitable[T]], *, writes: bool = False) -> T:
    async def on_keys(ws: WriteSafe) -> T:
        await ws.start()
        return await action(ws.ledger.api_keys())

    return run(ws, on_keys, may_create=writes)


def _public(record: ApiKeyRecord) -> dict[str, Any]:
    return {
        "key_id": record.key_id,
        "scope": record.scope,
        "role": record.role.value,
        "name": record.name,
        "created_at": record.created_at.isoformat(),
        "revoked_at": record.revoked_at.isoformat() if record.revoked_at else None,
    }


def _table(records: list[ApiKeyRecord]) -> Table:
    table = Table(title="API keys")
    for column in ("key id", "scope", "role", "name", "created", "revoked"):
        table.add_column(column)
    for record in records:
        public = _public(record)
        table.add_row(
            *(
                str(public[f] or "")
                for f in ("key_id", "scope", "role", "name", "created_at", "revoked_at")
            )
        )
    return table
