"""Tombstones are pruned too, oldest first: an index on `pruned_at`, so that each batch reads
only the tombstones it deletes (the table grows by one row per key ever pruned, and only the
pruner writes it, so the index costs the guarded calls nothing).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_writesafe_pruned_keys_pruned_at", "writesafe_pruned_keys", ["pruned_at"])


def downgrade() -> None:
    op.drop_index("ix_writesafe_pruned_keys_pruned_at", table_name="writesafe_pruned_keys")
