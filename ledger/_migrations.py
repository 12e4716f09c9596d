"""Alembic, driven from code: `writesafe db upgrade`, or the embedded default on start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.schema import CreateSchema

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

# Alembic is imported where a migration runs, not with the ledger: it costs every process
# (each CLI call, each worker) a few hundred milliseconds that most of them never need.

# Our own version table, so writesafe's migrations never collide with the application's Alembic.
VERSION_TABLE = "writesafe_alembic_version"


class LedgerNotMigrated(RuntimeError):
    """The database schema is behind this version of writesafe."""


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "writesafe.ledger:migrations")
    return config


def _scripts() -> ScriptDirectory:
    """The migrations the ledger ships."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config())


def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None, "the ledger ships at least one migration"
    return head


def revisions() -> list[str]:
    """Every migration the ledger ships, oldest first: what a downgrade may go back to (or
    `base`, none)."""
    walked = _scripts().walk_revisions()  # newest first
    return [script.revision for script in reversed(list(walked))]


# Any fixed 32-bit number: with the schema's hash, the PostgreSQL advisory lock that serialises
# concurrent upgrades of one schema (ledgers in other schemas migrate without waiting for it).
_MIGRATION_LOCK = 0x77736166
_LOCK_SCHEMA = text("SELECT pg_advisory_xact_lock(:key, hashtext(coalesce(current_schema(), '')))")


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Apply migrations up to `revision` in one transaction.

    Many workers may start at once: PostgreSQL upgrades of one schema queue on an advisory lock
    (SQLite on its write lock), so the first one migrates and the others find the schema current.
    A schema already at head is only read: its workers need not queue behind one another. A
    PostgreSQL schema that does not exist yet is created in the same transaction, under the lock
    (two CREATE SCHEMA at once collide): a worker that finds it missing meanwhile takes the same
    lock, its `current_schema()` being NULL as the first one's was. One that exists is not
    created again: even IF NOT EXISTS needs the CREATE privilege on the database, which the role
    of a schema made by someone else may lack.
    """
    if revision == "head" and await current_revision(engine) == head_revision():
        return
    async with engine.begin() as connection:
        schema = await in_ledger_schema(connection)
        if connection.dialect.name == "postgresql":
            await connection.execute(_LOCK_SCHEMA, {"key": _MIGRATION_LOCK})
            if schema is not None and not await connection.scalar(_SCHEMA_EXISTS, {"name": schema}):
                await connection.execute(CreateSchema(schema))
        await connection.run_sync(_upgrade, revision)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    """Undo migrations down to `revision` (`base`: none left), in one transaction."""
    async with engine.begin() as connection:
        await in_ledger_schema(connection)
        await connection.run_sync(_downgrade, revision)


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as connection:
        await in_ledger_schema(connection)
        return await connection.run_sync(_current)


_SCHEMA_EXISTS = text("SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = :name)")
_SET_LOCAL_SEARCH_PATH = text("SELECT set_config('search_path', quote_ident(:schema), true)")


async def in_ledger_schema(connection: AsyncConnection) -> str | None:
    """Point this transaction's `search_path` at the ledger's schema, and name it (None: the
    connection's default).

    Statements name it themselves (the engine's `schema_translate_map`), but Alembic looks its
    version table up through `search_path`. Set for the transaction only (`SET LOCAL`), never
    when the connection starts: a pooler refuses or silently drops that, and the tables would
    land in `public`.
    """
    assert connection.sync_connection is not None, "an open connection"
    options = connection.sync_connection.get_execution_options()
    schema = (options.get("schema_translate_map") or {}).get(None)
    if schema is not None:
        await connection.execute(_SET_LOCAL_SEARCH_PATH, {"schema": schema})
    return schema


async def ensure_current(engine: AsyncEngine) -> None:
    """Raise `LedgerNotMigrated` with the command that fixes it unless the schema is at head."""
    current, head = await current_revision(engine), head_revision()
    if current != head:
        raise LedgerNotMigrated(
            f"the ledger schema is at {current or 'nothing'}, this writesafe needs {head}: "
            "run `writesafe db upgrade` (or pass auto_migrate=True)"
        )


def _upgrade(connection: Connection, revision: str) -> None:
    from alembic import command

    config = _config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _downgrade(connection: Connection, revision: str) -> None:
    from alembic import command

    config = _config()
    config.attributes["connection"] = connection
    command.downgrade(config, revision)


def _current(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()
