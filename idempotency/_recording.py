"""Recording how an execution ended: fenced by its lease, retried briefly, never twice.

The ledger write that closes an execution is the one the guard must not lose to a dropped
connection, and must not repeat: a retried finish that finds its first try committed takes it.
"""

from __future__ import annotations

import functools
import logging

from sqlalchemy.exc import SQLAlchemyError
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from writesafe.idempotency._attempts import retried
from writesafe.idempotency._metrics import LEASES_LOST, executed
from writesafe.ledger import Ledger, OperationRecord, Outcome
from writesafe.reconciler._decisions import committed_earlier
from writesafe.reconciler._ledger_causes import ledger_failure

logger = logging.getLogger("writesafe")

# What "the ledger cannot be reached" looks like from the guard.
LEDGER_ERRORS: tuple[type[BaseException], ...] = (SQLAlchemyError, OSError, TimeoutError)


async def record_outcome(
    ledger: Ledger,
    tool: str,
    operation: OperationRecord,
    owner: str,
    outcome: Outcome,
    retry_seconds: float,
) -> OperationRecord | None:
    """Write the outcome, retrying the ledger for up to `retry_seconds`; None if it could not be
    recorded (the ledger is gone, or the lease was taken over)."""
    executed(tool, outcome.status.value).inc()
    try:
        try:  # `attempt`, its first try made here (see `retried`)
            recorded = await ledger.finish(operation, owner, outcome)
        except Exception as first:
            again = functools.partial(_finish_again, ledger, operation, owner, outcome)
            retrying = functools.partial(_retrying, retry_seconds)
            recorded = await retried(first, again, retrying)
    except LEDGER_ERRORS as error:
        failure = ledger_failure(error)
        logger.error(
            "could not record the outcome of %s/%s (%s: %s); its lease will hand it to "
            "reconciliation",
            operation.scope,
            operation.key,
            failure.cause,
            failure.detail,
        )
        return None
    if recorded is None:
        LEASES_LOST.labels(tool).inc()
        logger.warning(
            "lease on %s/%s was taken over; the outcome stays with its attempt",
            operation.scope,
            operation.key,
        )
    return recorded


async def _finish_again(
    ledger: Ledger, operation: OperationRecord, owner: str, outcome: Outcome
) -> OperationRecord | None:
    """A try after the first: one that finds its row moved on takes it if an earlier try of
    this same finish committed it (the connection dropped after the commit)."""
    recorded = await ledger.finish(operation, owner, outcome)
    if recorded is None:
        row = await ledger.get(operation.scope, operation.key)
        recorded = row if committed_earlier(row, operation, outcome) else None
    return recorded


def _retrying(retry_seconds: float) -> AsyncRetrying:
    return AsyncRetrying(
        stop=stop_after_delay(retry_seconds) | stop_after_attempt(6),
        wait=wait_exponential(multiplier=0.05, max=0.5),
        retry=retry_if_exception_type(LEDGER_ERRORS),
        reraise=True,
    )
