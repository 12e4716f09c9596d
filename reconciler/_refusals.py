"""The envelopes a guarded call ends with when it does not get to execute, or cannot record.

Pure values, no I/O: the guard decides that a key is taken, busy or that its ledger is gone,
and these say so in the contract's terms, naming the operation so that a caller can come back
to it (its key may have been derived).
"""

from __future__ import annotations

from writesafe.ledger import OperationRecord, Status
from writesafe.reconciler._causes import LEDGER
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


def write_not_started(codes: CodeRegistry, operation: OperationInfo | None = None) -> ErrorEnvelope:
    """The ledger could not be reached before any write: nothing ran, retry later."""
    return codes.envelope(
        Code.TEMP_UNAVAILABLE,
        "the ledger is unavailable; the write was not started",
        retry_after_ms=LEDGER_RETRY_AFTER_MS,
        side_effects=SideEffects.NONE,
        cause=LEDGER,
        operation=operation,
    )


def ledger_lost(operation: OperationRecord, codes: CodeRegistry) -> ErrorEnvelope:
    """The ledger failed while a call decided about an existing operation; the call wrote
    nothing. What the caller may assume is what the operation already was: a failed one proved
    no effect, anything else may still have one."""
    if operation.status is Status.FAILED:
        return write_not_started(codes, operation_info(operation))
    return codes.envelope(
        Code.OUTCOME_UNKNOWN,
        "the ledger is unavailable; an earlier execution may have been applied",
        retry_after_ms=LEDGER_RETRY_AFTER_MS,
        cause=LEDGER,
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
