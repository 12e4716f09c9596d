"""Compact SQLite rows: timestamps as whole microseconds, digests as their 32 bytes.

SQLAlchemy stores a SQLite datetime as 26 characters of text and a SHA-256 as 64 hex
characters; a guarded call writes three timestamps and a fingerprint on its operation, two and
another copy of the fingerprint on its attempt, and the listing index repeats `updated_at`.
As an 8-byte integer and a 32-byte BLOB (`writesafe.ledger._models.UTCDateTime`, `Digest`) they
take about 170 bytes less per operation. The columns keep the types 0001 declared (SQLite does
not enforce them), so the upgrade rewrites the values in place, one UPDATE per table, with no
table rebuild; PostgreSQL's columns are already compact (`timestamptz`) or kept as they are
(docs/performance.md), and its upgrade does nothing.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from collections.abc import Callable
from typing import Any

from alembic import op
from sqlalchemy import Connection, text

from writesafe.ledger._models import digest_bytes

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TIMESTAMPS = {
    "writesafe_operations": (
        "lease_expires_at",
        "last_sent_at",
        "next_check_at",
        "created_at",
        "updated_at",
    ),
    "writesafe_attempts": ("started_at", "finished_at"),
    "writesafe_api_keys": ("created_at", "revoked_at"),
}
_DIGESTS = {
    "writesafe_operations": ("fingerprint", "auth_hash"),
    "writesafe_attempts": ("fingerprint",),
}

# SQLAlchemy's text is 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC); the seconds from strftime, the
# microseconds from the fraction, padded in case it was ever written shorter.
_TO_MICROS = (
    "CAST(strftime('%s', {c}) AS INTEGER) * 1000000"
    " + CAST(substr(substr({c}, 21) || '000000', 1, 6) AS INTEGER)"
)
_TO_TEXT = (
    "strftime('%Y-%m-%d %H:%M:%S', {c} / 1000000, 'unixepoch')"
    " || '.' || substr('000000' || ({c} % 1000000), -6)"
)


def upgrade() -> None:
    _rewrite_sqlite(_TO_MICROS, "text", "text", digest_bytes)


def downgrade() -> None:
    _rewrite_sqlite(_TO_TEXT, "integer", "blob", bytes.hex)


def _rewrite_sqlite(
    timestamp: str, timestamp_stored: str, digest_stored: str, digest: Callable[[Any], Any]
) -> None:
    """On SQLite: every timestamp stored as `timestamp_stored` through the SQL `timestamp`, every
    digest stored as `digest_stored` through `digest`."""
    connection = op.get_bind()
    if connection.dialect.name != "sqlite":
        return
    _rewrite(connection, timestamp, f"typeof({{c}}) = '{timestamp_stored}'")
    for table, columns in _DIGESTS.items():
        for column in columns:
            _convert(connection, table, column, digest_stored, digest)


def _rewrite(connection: Connection, expression: str, applies: str) -> None:
    """Every timestamp through `expression`, where its stored form is the old one."""
    for table, columns in _TIMESTAMPS.items():
        assignments = ", ".join(
            f"{c} = CASE WHEN {applies.format(c=c)} THEN {expression.format(c=c)} ELSE {c} END"
            for c in columns
        )
        connection.execute(text(f"UPDATE {table} SET {assignments}"))


def _convert(
    connection: Connection, table: str, column: str, stored: str, convert: Callable[[Any], Any]
) -> None:
    """`column`'s values of SQLite type `stored`, each through `convert` (SQLite 3.40 has no
    unhex()), one UPDATE per distinct value: a ledger's fingerprints repeat."""
    found = connection.execute(
        text(f"SELECT DISTINCT {column} FROM {table} WHERE typeof({column}) = '{stored}'")
    ).scalars()
    for value in list(found):
        connection.execute(
            text(f"UPDATE {table} SET {column} = :new WHERE {column} = :old"),
            {"new": convert(value), "old": value},
        )
