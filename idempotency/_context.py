"""The operation a write is executing under, visible inside the wrapped function."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OperationContext:
    """Forward `key` downstream as a client reference / Idempotency-Key so lookups can find it."""

    key: str
    scope: str
    tool: str
    execution: int


_current: ContextVar[OperationContext | None] = ContextVar("writesafe_operation", default=None)


def current_operation() -> OperationContext | None:
    """The operation being executed by the calling task, or None outside a guarded write."""
    return _current.get()


def set_current(context: OperationContext | None) -> object:
    return _current.set(context)


def reset_current(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]
