"""Alembic environment for the ledger; migrations run on a connection handed over by ledger code."""

from alembic import context

from writesafe.ledger._migrations import VERSION_TABLE
from writesafe.ledger._models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the ledger's migrations with `writesafe db upgrade`")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
