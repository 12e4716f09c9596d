"""The ledger: operations (one row per scope and key) and their audited attempts.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "writesafe_operations",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(255), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("tool", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(64)),
        sa.Column("lease_expires_at", _TS),
        sa.Column("executions", sa.Integer(), nullable=False),
        sa.Column("max_executions", sa.Integer(), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=False),
        sa.Column("auth_hash", sa.String(64)),
        sa.Column("result", sa.Text()),
        sa.Column("error", sa.Text()),
        sa.Column("last_code", sa.String(64)),
        sa.Column("last_sent_at", _TS),
        sa.Column("checks", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("next_check_at", _TS),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.UniqueConstraint("scope", "key", name="uq_writesafe_operations_scope_key"),
    )
    op.create_index(
        "ix_writesafe_operations_status_updated", "writesafe_operations", ["status", "updated_at"]
    )
    op.create_index(
        "ix_writesafe_operations_tool_status",
        "writesafe_operations",
        ["tool", "status", "updated_at"],
    )
    op.create_index(
        "ix_writesafe_operations_status_lease",
        "writesafe_operations",
        ["status", "lease_expires_at"],
    )
    op.create_index(
        "ix_writesafe_operations_status_next_check",
        "writesafe_operations",
        ["status", "next_check_at"],
    )
    op.create_table(
        "writesafe_attempts",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column(
            "operation_id",
            _ID,
            sa.ForeignKey("writesafe_operations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("execution", sa.Integer()),
        sa.Column("owner", sa.String(64)),
        sa.Column("fingerprint", sa.String(64)),
        sa.Column("outcome", sa.String(32)),
        sa.Column("code", sa.String(64)),
        sa.Column("envelope", sa.Text()),
        sa.Column("evidence", sa.Text()),
        sa.Column("actor", sa.String(255)),
        sa.Column("reason", sa.Text()),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("finished_at", _TS),
    )
    op.create_index("ix_writesafe_attempts_operation", "writesafe_attempts", ["operation_id", "id"])


def downgrade() -> None:
    op.drop_table("writesafe_attempts")
    op.drop_table("writesafe_operations")
