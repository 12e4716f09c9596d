"""The ledger's tables, declared as SQLAlchemy 2 mapped classes.

JSON payloads (arguments, results, envelopes, evidence) are stored as text written by our own
serializer, so a stored `null`, `0` or `""` can never be confused with a missing value.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    literal_column,
    text,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

from writesafe.ledger._states import Status

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit identity.
_ID = BigInteger().with_variant(Integer(), "sqlite")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class _SqliteMicros(sqlite.DATETIME):
    """SQLite's column as migration 0001 declared it, DATETIME, holding whole microseconds
    since the epoch (8 bytes) instead of SQLAlchemy's 26-character text: a timestamp is written
    three to five times per guarded call and kept in the listing index (migration 0004)."""

    def bind_processor(self, dialect: Dialect) -> None:
        return None

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        return None


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite would hand back naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(_SqliteMicros())  # type: ignore[no-untyped-call]
        return dialect.type_descriptor(self.impl_instance)

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | int | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("ledger timestamps must be timezone-aware")
        if dialect.name == "sqlite":
            return (value - _EPOCH) // _MICROSECOND
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, int):
            return _EPOCH + value * _MICROSECOND
        assert isinstance(value, datetime)
        return value.astimezone(UTC)


def digest_bytes(value: str) -> str | bytes:
    """A lowercase SHA-256 hex digest as its 32 bytes; any other text as it is, so that every
    value reads back as written."""
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return value
    return raw if len(raw) == 32 and raw.hex() == value else value


class Digest(TypeDecorator[str]):
    """A SHA-256 hex digest; SQLite keeps its 32 bytes as a BLOB in the column 0001 declared
    (half of the 64 characters, in the operation row and again in its attempt; migration 0004).
    PostgreSQL keeps the text: its rows are dominated by what a first execution's update leaves
    behind (docs/performance.md)."""

    impl = String(64)
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | bytes | None:
        if value is None or dialect.name != "sqlite":
            return value
        return digest_bytes(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        if isinstance(value, bytes):
            return value.hex()
        return None if value is None else str(value)


def _open_state(status: Status) -> dict[str, Any]:
    """The `Index` options that make it partial over the rows in `status`, on both backends
    (the migrations build the same predicates)."""
    predicate = text(f"status = '{status.value}'")
    return {"postgresql_where": predicate, "sqlite_where": predicate}


def status_in(statuses: Iterable[Status]) -> ColumnElement[bool]:
    """`status IN (…)` with the states written into the SQL text: a partial index over a state
    serves a query only when the planner can see that state, and a bound parameter hides it."""
    states: list[ColumnElement[str]] = [
        literal_column(f"'{Status(status).value}'") for status in statuses
    ]
    column = Operation.__table__.c.status
    # SQLite proves a partial index's `status = 'x'` from `status = 'x'` only, not `IN ('x')`.
    return column == states[0] if len(states) == 1 else column.in_(states)


class Base(DeclarativeBase):
    """Declarative base of the ledger schema (the metadata Alembic migrations describe)."""


class Operation(Base):
    """One idempotent operation: the authoritative claim on `(scope, key)` and its current state."""

    __tablename__ = "writesafe_operations"
    # Only the indexes writesafe's own queries use (docs/performance.md, "The lean schema"):
    # every index is written on each guarded call that changes its columns, and a status-led
    # index over every row is rewritten by both commits of a first execution.
    __table_args__ = (
        # The claim: the authoritative `(scope, key)`, and the fetch by key.
        UniqueConstraint("scope", "key", name="uq_writesafe_operations_scope_key"),
        # The service lists one tenant's operations in keyset order, whatever the status filter.
        Index("ix_writesafe_operations_scope_updated", "scope", "updated_at", "id"),
        # The open states are few and short-lived, so partial indexes over them stay small: the
        # reconciler's queue of crashed executions (expired leases) and of unknown outcomes, and
        # the operators' list of what needs attention.
        Index(
            "ix_writesafe_operations_leases",
            "lease_expires_at",
            **_open_state(Status.IN_FLIGHT),
        ),
        Index(
            "ix_writesafe_operations_unknown",
            "next_check_at",
            **_open_state(Status.OUTCOME_UNKNOWN),
        ),
        Index(
            "ix_writesafe_operations_attention",
            "scope",
            "updated_at",
            "id",
            **_open_state(Status.NEEDS_ATTENTION),
        ),
    )

    id: Mapped[int] = mapped_column(_ID, primary_key=True, autoincrement=True)
    scope: Mapped[str] = mapped_column(String(255))
    key: Mapped[str] = mapped_column(String(255))
    tool: Mapped[str] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(Digest())
    status: Mapped[str] = mapped_column(String(32))
    version: Mapped[int] = mapped_column(Integer)
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    executions: Mapped[int] = mapped_column(Integer)
    max_executions: Mapped[int] = mapped_column(Integer)
    arguments: Mapped[str] = mapped_column(Text)
    auth_hash: Mapped[str | None] = mapped_column(Digest())
    result: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    last_code: Mapped[str | None] = mapped_column(String(64))
    last_sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    checks: Mapped[int] = mapped_column(Integer, default=0)
    next_check_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Attempt(Base):
    """One audited event of an operation: an execution, a lookup or an operator's act."""

    __tablename__ = "writesafe_attempts"
    __table_args__ = (Index("ix_writesafe_attempts_operation", "operation_id", "id"),)

    id: Mapped[int] = mapped_column(_ID, primary_key=True, autoincrement=True)
    operation_id: Mapped[int] = mapped_column(
        _ID, ForeignKey("writesafe_operations.id", ondelete="CASCADE")
    )
    kind: Mapped[str] = mapped_column(String(16))
    execution: Mapped[int | None] = mapped_column(Integer)
    owner: Mapped[str | None] = mapped_column(String(64))
    fingerprint: Mapped[str | None] = mapped_column(Digest())
    outcome: Mapped[str | None] = mapped_column(String(32))
    code: Mapped[str | None] = mapped_column(String(64))
    envelope: Mapped[str | None] = mapped_column(Text)
    evidence: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str | None] = mapped_column(String(255))
    reason: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class LedgerState(Base):
    """The ledger's one state row: its identity for the mark kept outside it, the largest id
    that mark was raised to, and a restore while it is open (migration 0005)."""

    __tablename__ = "writesafe_ledger_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    ledger_id: Mapped[str] = mapped_column(String(32))
    seen_id: Mapped[int] = mapped_column(BigInteger)
    generation: Mapped[int] = mapped_column(BigInteger)
    timeline: Mapped[int | None] = mapped_column(BigInteger)
    checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    restored_since: Mapped[datetime | None] = mapped_column(UTCDateTime())
    detected_by: Mapped[str | None] = mapped_column(String(16))
    recorded_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    closes_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ApiKey(Base):
    """A service API key: only the SHA-256 of its secret is kept, with its scope and role."""

    __tablename__ = "writesafe_api_keys"
    __table_args__ = (
        UniqueConstraint("key_id", name="uq_writesafe_api_keys_key_id"),
        UniqueConstraint("secret_hash", name="uq_writesafe_api_keys_secret_hash"),
    )

    id: Mapped[int] = mapped_column(_ID, primary_key=True, autoincrement=True)
    key_id: Mapped[str] = mapped_column(String(32))
    secret_hash: Mapped[str] = mapped_column(String(64))
    scope: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class PrunedKey(Base):
    """A tombstone: a key whose final operation retention pruned. Its status then says
    "expired", not "never seen"; the key itself is free (its next call is a new operation)."""

    __tablename__ = "writesafe_pruned_keys"
    # Retention forgets the oldest tombstones first (0007); only pruning writes this table.
    __table_args__ = (Index("ix_writesafe_pruned_keys_pruned_at", "pruned_at"),)

    scope: Mapped[str] = mapped_column(String(255), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    pruned_at: Mapped[datetime] = mapped_column(UTCDateTime())
