"""Which backend a ledger URL names: its engine and the writer of its hot path, made together.

The one place that chooses between SQLite and PostgreSQL; past it, `Ledger` asks its writer
what differs (`ledger._writer.Writer`), never which backend it has.
"""

from __future__ import annotations

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from writesafe.ledger._engine import (
    ConnectionBudget,
    create_engine,
    parse_url,
    postgres_connect_options,
    sqlite_file,
)
from writesafe.ledger._pg_writer import PostgresWriter
from writesafe.ledger._sqlite_writer import SqliteWriter
from writesafe.ledger._writer import Writer


def open_backend(
    url: str | URL, *, schema: str | None, connect_timeout: float, budget: ConnectionBudget
) -> tuple[AsyncEngine, Writer]:
    """The engine and the writer for `url`; on PostgreSQL they share `budget`."""
    engine = create_engine(url, schema=schema, connect_timeout=connect_timeout, budget=budget)
    if parse_url(url).get_backend_name() == "sqlite":
        return engine, SqliteWriter(sqlite_file(url))
    options = postgres_connect_options(url, connect_timeout=connect_timeout)
    return engine, PostgresWriter(options, schema, budget)
