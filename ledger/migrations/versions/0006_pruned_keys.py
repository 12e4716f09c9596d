"""Tombstones of pruned keys: a key whose operation retention deleted says "expired", not
"never seen". One small row per pruned key (scope, key, when), replaced when it is pruned again.

Revision ID: 0006
Revises: 0004
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "writesafe_pruned_keys",
        sa.Column("scope", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        # SQLite stores it as whole microseconds (`UTCDateTime`, 0004), and does not enforce it.
        sa.Column("pruned_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("writesafe_pruned_keys")
