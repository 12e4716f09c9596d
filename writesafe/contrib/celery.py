"""Celery: a task whose side effect runs at most once per key — the task id by default.

A broker delivers a task at least once: with `acks_late`, a worker that dies mid-task leaves its
message unacknowledged and the broker hands it to another worker (Redis and SQS after the
visibility timeout, RabbitMQ when the connection drops). The task body runs as a sync tool keyed
by the task id, which a redelivery keeps, so the second worker finds the first one's operation:
finished → its result, without running the body again; the first worker died mid-effect → its
lease runs out, the outcome is unknown, and the tool's lookup settles it before anything runs
again. A duplicate that arrives while the key is still leased, or whose lookup cannot tell yet,
is retried later by Celery (`Task.retry`), with the same task id and so the same key.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from writesafe._extras import MissingExtra

try:
    from celery import current_task
except ModuleNotFoundError as missing:
    raise MissingExtra(__name__, "celery", missing) from missing

from writesafe.idempotency._errors import WriteSafeError, invalid_input
from writesafe.idempotency._writesafe import WriteSafe
from writesafe.reconciler import Code, LookupOperation, LookupResult

__all__ = ["idempotent_task"]

F = TypeVar("F", bound=Callable[..., Any])

# Envelopes that ask to come back later with the same key: another worker holds it, or the
# outcome is not settled yet. Any other failure fails the task.
_LATER = frozenset({Code.IN_PROGRESS, Code.OUTCOME_UNKNOWN})


def idempotent_task(
    ws: WriteSafe,
    name: str | None = None,
    *,
    key: Callable[..., str] | None = None,
    lookup: Callable[[LookupOperation], LookupResult] | None = None,
    settle_after: float = 5.0,
    **options: Any,
) -> Callable[[F], F]:
    """Guard a Celery task's body: put it under `@app.task(acks_late=True, ...)`.

    The key is the task id, or `key(*args, **kwargs)` of the task's arguments (e.g. an order id,
    so that two tasks sent for one order are one operation). `name` (default: the function's
    module and name) is the tool name in the ledger; `lookup`, `settle_after` and the other
    `options` are those of `ws.tool`. The body is fingerprinted by its arguments; a body whose
    first parameter is `self` is a bound task (`bind=True`): the task is passed to it and left
    out of the fingerprint and of `key`. IN_PROGRESS and OUTCOME_UNKNOWN retry the task (within
    its `max_retries`); other failures raise `WriteSafeError`.
    """

    def decorate(function: F) -> F:
        bound = list(inspect.signature(function).parameters)[:1] == ["self"]
        tool = ws.tool(
            name or f"{function.__module__}.{function.__qualname__}",
            lookup=lookup,
            settle_after=settle_after,
            **options,
        )(_unbound(function) if bound else function)

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            if bound:
                task, *rest = args
                args = tuple(rest)
            else:
                task = current_task if current_task else None  # a proxy, false outside a task
            task_id = None if task is None else task.request.id
            chosen = key(*args, **kwargs) if key is not None else task_id
            if chosen is None:
                raise invalid_input("idempotency_key", "called outside a worker: give key=")
            token = _bound_task.set(task)
            try:
                return tool(*args, idempotency_key=chosen, **kwargs)
            except WriteSafeError as error:
                envelope = error.envelope
                if task is None or task_id is None or envelope.code not in _LATER:
                    raise
                later = (
                    settle_after
                    if envelope.retry_after_ms is None
                    else envelope.retry_after_ms / 1000
                )
                raise task.retry(exc=error, countdown=later) from error
            finally:
                _bound_task.reset(token)

        return run  # type: ignore[return-value]

    return decorate


# The bound task of the call running on this thread (a sync tool runs its write here).
_bound_task: ContextVar[Any] = ContextVar("writesafe_bound_task", default=None)


def _unbound(function: Callable[..., Any]) -> Callable[..., Any]:
    """A bound task's body as the tool sees it: without `self`, which the call passes in."""

    @functools.wraps(function)
    def body(*args: Any, **kwargs: Any) -> Any:
        return function(_bound_task.get(), *args, **kwargs)

    signature = inspect.signature(function)
    body.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=list(signature.parameters.values())[1:]
    )
    return body
