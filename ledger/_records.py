"""Immutable snapshots of ledger rows: what callers get back instead of live ORM objects."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, Self

from writesafe.ledger._states import Status


class AttemptKind(StrEnum):
    """What an attempt row records."""

    EXECUTION = "execution"
    LOOKUP = "lookup"
    OPERATOR = "operator"


class _Row(Protocol):
    """A result row addressable by column name (SQLAlchemy's `RowMapping`, asyncpg's `Record`)."""

    def __getitem__(self, name: str, /) -> Any: ...


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(record: type) -> tuple[str, ...]:
    """`fields()` walks the class on every call; a row is read on every guarded call."""
    names = _FIELD_NAMES.get(record)
    if names is None:
        names = _FIELD_NAMES[record] = tuple(f.name for f in fields(record))
    return names


@dataclass(frozen=True, slots=True)
class _Record:
    @classmethod
    def from_row(cls, row: _Row) -> Self:
        return cls(**{name: row[name] for name in _field_names(cls)})

    def with_values(self, **changes: Any) -> Self:
        """`dataclasses.replace`, without walking the fields again on every call."""
        values = {name: getattr(self, name) for name in _field_names(type(self))}
        return type(self)(**(values | changes))


_STATUSES: dict[str, Status] = {status.value: status for status in Status}


@dataclass(frozen=True, slots=True)
class OperationRecord(_Record):
    """An operation as last read from the ledger; `version` is what a compare-and-set must match."""

    id: int
    scope: str
    key: str
    tool: str
    fingerprint: str
    status: Status
    version: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    executions: int
    max_executions: int
    arguments: str
    auth_hash: str | None
    result: str | None
    error: str | None
    last_code: str | None
    # The latest moment the last execution may have sent its write: when it started, or, once its
    # lease was taken from it, when it was taken (the writer may send until its fence closes).
    last_sent_at: datetime | None
    checks: int
    next_check_at: datetime | None
    created_at: datetime
    updated_at: datetime

    def __post_init__(self) -> None:
        status = self.status
        if type(status) is not Status:  # rows hold the plain string
            # A dict lookup: `Status(...)` is two Python calls, and every row read makes one.
            object.__setattr__(self, "status", _STATUSES.get(status) or Status(status))

    def lease_expired(self, now: datetime) -> bool:
        """True when an `in_flight` lease can no longer be trusted to finish by itself."""
        return self.lease_expires_at is None or self.lease_expires_at <= now


@dataclass(frozen=True, slots=True)
class AttemptRecord(_Record):
    """One audited attempt of an operation."""

    id: int
    operation_id: int
    kind: AttemptKind
    execution: int | None
    owner: str | None
    fingerprint: str | None
    outcome: str | None
    code: str | None
    envelope: str | None
    evidence: str | None
    actor: str | None
    reason: str | None
    started_at: datetime
    finished_at: datetime | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", AttemptKind(self.kind))
