"""Migration 0004 rewrites a populated SQLite ledger's timestamps and digests in place, and back."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from writesafe.ledger import Ledger
from writesafe.ledger._migrations import downgrade, upgrade

FINGERPRINT = "ab" * 32
# As SQLAlchemy wrote SQLite datetimes before 0004: naive UTC text with six-digit microseconds.
SENT, DONE, LEASE = (
    "2026-12-01 12:00:00.000123",
    "2026-12-01 12:00:01.500000",
    "2026-12-01 12:00:15",
)

_OPERATION = """
INSERT INTO writesafe_operations (scope, key, tool, fingerprint, status, version, lease_owner,
    lease_expires_at, executions, max_executions, arguments, auth_hash, last_sent_at, checks,
    created_at, updated_at)
VALUES ('default', ?, 'submit', ?, ?, 1, ?, ?, 1, 3, '{}', ?, ?, 0, ?, ?)
"""
_ATTEMPT = """
INSERT INTO writesafe_attempts (operation_id, kind, execution, owner, fingerprint, outcome,
    started_at, finished_at)
VALUES (?, 'execution', 1, 'owner-1', ?, 'succeeded', ?, ?)
"""


def _write_old_rows(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(
            _OPERATION, ("done", FINGERPRINT, "succeeded", None, None, "cd" * 32, SENT, SENT, DONE)
        )
        connection.execute(
            _OPERATION,
            ("open", "not-a-digest", "in_flight", "owner-2", LEASE, None, SENT, SENT, SENT),
        )
        connection.execute(_ATTEMPT, (1, FINGERPRINT, SENT, DONE))
        connection.execute(
            "INSERT INTO writesafe_api_keys (key_id, secret_hash, scope, role, name, created_at)"
            " VALUES ('k1', 'h', 'default', 'admin', 'n', ?)",
            (SENT,),
        )


def _stored(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as connection:
        return [
            *connection.execute(
                "SELECT fingerprint, auth_hash, lease_expires_at, last_sent_at, created_at,"
                " updated_at FROM writesafe_operations ORDER BY id"
            ),
            *connection.execute(
                "SELECT fingerprint, started_at, finished_at FROM writesafe_attempts ORDER BY id"
            ),
            *connection.execute("SELECT created_at, revoked_at FROM writesafe_api_keys"),
        ]


async def test_0004_compacts_a_populated_sqlite_ledger_and_reads_it_back(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{path}")
    try:
        await upgrade(ledger.engine, "0003")
        _write_old_rows(path)
        before = _stored(path)

        await ledger.migrate()

        done, still_open = await ledger.get("default", "done"), await ledger.get("default", "open")
        assert done is not None
        assert still_open is not None
        assert done.fingerprint == FINGERPRINT
        assert done.auth_hash == "cd" * 32
        assert done.last_sent_at == datetime(2026, 12, 1, 12, 0, 0, 123, tzinfo=UTC)
        assert done.updated_at == datetime(2026, 12, 1, 12, 0, 1, 500000, tzinfo=UTC)
        assert still_open.fingerprint == "not-a-digest"  # not a digest: kept as text
        assert still_open.lease_expires_at == datetime(2026, 12, 1, 12, 0, 15, tzinfo=UTC)
        (attempt,) = await ledger.attempts(done.id)
        assert attempt.fingerprint == FINGERPRINT
        assert attempt.finished_at == done.updated_at
        with sqlite3.connect(path) as connection:
            kinds = connection.execute(
                "SELECT typeof(fingerprint), typeof(updated_at), typeof(lease_expires_at)"
                " FROM writesafe_operations ORDER BY id"
            ).fetchall()
        assert kinds == [("blob", "integer", "null"), ("text", "integer", "integer")]

        await downgrade(ledger.engine, "0003")
        after = _stored(path)
        # Back to text; a lease written without microseconds comes back with six zeros.
        assert after == [
            row if LEASE not in row else tuple(f"{LEASE}.000000" if v == LEASE else v for v in row)
            for row in before
        ]
    finally:
        await ledger.close()
