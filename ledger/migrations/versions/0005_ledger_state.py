"""The ledger's own state: its identity, how far it has been seen, and whether it was restored.

One row. `ledger_id` names this ledger to the high-water mark kept outside it (a file beside a
SQLite ledger, a Redis key); a copy restored from a backup keeps it, a new ledger gets its own.
`seen_id` is the largest operation id the mark was raised to, so that pruning the newest rows
never looks like a rollback; `generation` counts the checks, so that a ledger restored to before
the last one is seen even once new rows have passed its old largest id. `restored_since` …
`closes_at` hold a detected or declared restore (docs/operations.md, "Backups, restores and
failover").

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    state = op.create_table(
        "writesafe_ledger_state",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("ledger_id", sa.String(32), nullable=False),
        sa.Column("seen_id", sa.BigInteger, nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("timeline", sa.BigInteger),
        sa.Column("checked_at", _TS),
        sa.Column("restored_since", _TS),
        sa.Column("detected_by", sa.String(16)),
        sa.Column("recorded_at", _TS),
        sa.Column("closes_at", _TS),
    )
    op.bulk_insert(state, [{"id": 1, "ledger_id": uuid.uuid4().hex, "seen_id": 0, "generation": 0}])


def downgrade() -> None:
    op.drop_table("writesafe_ledger_state")
