"""The lean schema: the indexes writesafe's queries use, partial over the open states.

Five indexes over every operation (four led by `status`, rewritten by both commits of every first
execution) give way to one over every operation, for the service's listing, and three partial ones
over the open states, which stay as small as the number of open operations. Upgrades in place:
each `CREATE INDEX` holds off writes while it builds (the partial ones read the table once and
keep only the open rows); see docs/operations.md, "Upgrading".

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TABLE = "writesafe_operations"

# The indexes of 0001 and 0002 over every operation: name, columns.
_BROAD = {
    "ix_writesafe_operations_status_updated": ["status", "updated_at"],
    "ix_writesafe_operations_tool_status": ["tool", "status", "updated_at"],
    "ix_writesafe_operations_status_lease": ["status", "lease_expires_at"],
    "ix_writesafe_operations_status_next_check": ["status", "next_check_at"],
    "ix_writesafe_operations_scope_status_updated": ["scope", "status", "updated_at", "id"],
}

# name, columns, the status the index is partial over (None: every row).
_LEAN = {
    "ix_writesafe_operations_scope_updated": (["scope", "updated_at", "id"], None),
    "ix_writesafe_operations_leases": (["lease_expires_at"], "in_flight"),
    "ix_writesafe_operations_unknown": (["next_check_at"], "outcome_unknown"),
    "ix_writesafe_operations_attention": (["scope", "updated_at", "id"], "needs_attention"),
}


def upgrade() -> None:
    for name in _BROAD:
        op.drop_index(name, _TABLE)
    for name, (columns, status) in _LEAN.items():
        where = None if status is None else sa.text(f"status = '{status}'")
        op.create_index(name, _TABLE, columns, postgresql_where=where, sqlite_where=where)


def downgrade() -> None:
    for name in _LEAN:
        op.drop_index(name, _TABLE)
    for name, columns in _BROAD.items():
        op.create_index(name, _TABLE, columns)
