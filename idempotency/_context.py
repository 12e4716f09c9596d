"""The operation a write is executing under, visible inside the wrapped function."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from writesafe.idempotency._fence import Fence


@dataclass(frozen=True, slots=True)
class OperationContext:
    """Forward `key` downstream as a client reference / Idempotency-Key so lookups can find it,
    and call `fence()` immediately before each send (the httpx integration does both)."""

    key: str
    scope: str
    tool: str
    execution: int
    _fence: Fence = field(repr=False, compare=False)

    @property
    def fencing_token(self) -> int:
        """Grows with every execution of the operation: a downstream that keeps the highest token
        it has seen per key can refuse a stale writer's request."""
        return self._fence.token

    def fence(self) -> None:
        """Admit one send, or raise `LeaseLost` if this execution's lease may have run out.

        Local and free of I/O, so call it immediately before every request the write sends. A
        refused first send proves the execution sent nothing; the guard records it so.
        """
        self._fence.admit()


class NoCurrentOperation(RuntimeError):
    """`current_operation()` was called outside a guarded write: there is no operation whose key
    to forward. A lookup runs outside one too (it is given `op.key`). A programming error, not a
    failure of the write."""

    def __init__(self) -> None:
        super().__init__(
            "current_operation() is only available inside a guarded write (a lookup gets op.key)"
        )


_current: ContextVar[OperationContext | None] = ContextVar("writesafe_operation", default=None)


def current_operation() -> OperationContext:
    """The operation being executed by the calling task; raises `NoCurrentOperation` outside a
    guarded write, so that inside one `current_operation().key` is a plain `str`."""
    operation = _current.get()
    if operation is None:
        raise NoCurrentOperation
    return operation


def active_operation() -> OperationContext | None:
    """The operation being executed by the calling task, or None: for code that runs both inside
    and outside guarded writes (the fenced transports, tracing)."""
    return _current.get()


def fence_of(operation: OperationContext) -> Fence:
    """The execution's fence itself, for the fenced transports: they check it early and admit
    the request as its write starts."""
    return operation._fence


def set_current(context: OperationContext | None) -> object:
    return _current.set(context)


def reset_current(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]
