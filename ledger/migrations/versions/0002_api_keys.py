"""Service API keys (the hash of each secret, mapped to a tenant scope and a role), and the index
the service lists one tenant's operations by.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "writesafe_api_keys",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("scope", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("revoked_at", _TS),
        sa.UniqueConstraint("key_id", name="uq_writesafe_api_keys_key_id"),
        sa.UniqueConstraint("secret_hash", name="uq_writesafe_api_keys_secret_hash"),
    )
    op.create_index(
        "ix_writesafe_operations_scope_status_updated",
        "writesafe_operations",
        ["scope", "status", "updated_at", "id"],
    )


def downgrade() -> None:
    op.drop_index("ix_writesafe_operations_scope_status_updated", "writesafe_operations")
    op.drop_table("writesafe_api_keys")
