"""The envelopes a guarded call ends with when it does not get to execute, or cannot record.

Pure values, no I/O: the guard decides that a key is taken, busy or that its ledger is gone,
and these say so in the contract's terms, naming the operation so that a caller can come back
to it (its key may have been derived).
"""

from __future__ import annotations

from writesafe.ledger import OperationRecord, Status
from writesafe.reconciler._causes import LEDGER, LedgerCause
from writesafe.reconciler._contract import (
    Code,
    CodeRegistry,
    ErrorEnvelope,
    OperationInfo,
    SideEffects,
)
from writesafe.reconciler._views import operation_info

LEDGER_RETRY_AFTER_MS = 1_000
"""When to come back after the ledger failed: a pooled connection or a failover takes about that."""
IN_PROGRESS_RETRY_AFTER_MS = 1_000
"""When to look again at a key another call is executing, where its lease says nothing sooner."""


def key_reused(key: str, tool: str, operation: OperationInfo, codes: CodeRegistry) -> ErrorEnvelope:
    return codes.envelope(
        Code.KEY_REUSED,
        f"key {key!r} was already used for a different payload of {tool}",
        field="idempotency_key",
        operation=operation,
    )


def in_progress(
    key: str,
    found: OperationRecord | None,
    max_executions: int,
    retry_after_ms: int | None,
    codes: CodeRegistry,
) -> ErrorEnvelope:
    """IN_PROGRESS naming the operation: the row `found` under the key, else as much as the
    waiting call knows (nothing executed yet, its whole budget left)."""
    info = (
        operation_info(found)
        if found is not None
        else OperationInfo(
            key=key, status=Status.IN_FLIGHT.value, attempt=0, attempts_left=max_executions
        )
    )
    return codes.envelope(
        Code.IN_PROGRESS,
        f"another call with key {key!r} is executing",
        retry_after_ms=retry_after_ms or IN_PROGRESS_RETRY_AFTER_MS,
        operation=info,
    )


# What each ledger cause says to the caller of a write that did not start.
_NOT_STARTED = {
    LedgerCause.UNREACHABLE: "the ledger could not be reached",
    LedgerCause.BUSY: "the ledger refused more clients for now",
    LedgerCause.BUDGET: "every ledger connection of this process's budget is in use",
    LedgerCause.STATEMENT: "the ledger rejected a statement",
    LedgerCause.MISCONFIGURED: "the ledger is misconfigured (see the log)",
}


def write_not_started(
    codes: CodeRegistry, cause: LedgerCause, operation: OperationInfo | None = None
) -> ErrorEnvelope:
    """The ledger failed before any write: nothing ran. An outage or a crowd passes (retry
    later, TEMP_UNAVAILABLE); a mistake does not, so it goes to a person (UNKNOWN_ERROR, handoff;
    its side effects stay `unknown`, as the contract has a reader of any rendering assume for a
    no-effect claim it cannot check: the message says the write was not started)."""
    message = f"{_NOT_STARTED[cause]}; the write was not started"
    if not cause.retryable:
        return codes.envelope(Code.UNKNOWN_ERROR, message, cause=cause, operation=operation)
    return codes.envelope(
        Code.TEMP_UNAVAILABLE,
        message,
        retry_after_ms=LEDGER_RETRY_AFTER_MS,
        side_effects=SideEffects.NONE,
        cause=cause,
        operation=operation,
    )


def ledger_lost(
    operation: OperationRecord, codes: CodeRegistry, cause: LedgerCause
) -> ErrorEnvelope:
    """The ledger failed while a call decided about an existing operation; the call wrote
    nothing. What the caller may assume is what the operation already was: a failed one proved
    no effect, anything else may still have one."""
    if operation.status is Status.FAILED:
        return write_not_started(codes, cause, operation_info(operation))
    return codes.envelope(
        Code.OUTCOME_UNKNOWN,
        f"{_NOT_STARTED[cause]}; an earlier execution may have been applied",
        retry_after_ms=LEDGER_RETRY_AFTER_MS if cause.retryable else None,
        cause=cause,
        operation=operation_info(operation),
    )


def unrecorded(operation: OperationRecord, codes: CodeRegistry) -> ErrorEnvelope:
    """The write ran but its outcome could not be recorded: its lease hands it to
    reconciliation, and until then nobody knows whether it was applied."""
    return codes.envelope(
        Code.OUTCOME_UNKNOWN,
        "the write ran but its outcome could not be recorded; reconcile before retrying",
        cause=LEDGER,
        operation=operation_info(operation),
    )
