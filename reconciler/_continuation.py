"""May a later call with the same key run the write again after a `failed` operation?

Only with evidence of the change the stored code asks for, and only while the execution budget
lasts. Everything else returns the stored failure without executing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from writesafe.ledger import OperationRecord
from writesafe.reconciler._causes import Untrusted
from writesafe.reconciler._contract import (
    Code,
    CodeRegistry,
    ErrorEnvelope,
    NextAction,
    SideEffects,
    UnknownCode,
    Verdict,
)


class Continuation(StrEnum):
    CONTINUE = "continue"
    STORED_FAILURE = "stored_failure"
    KEY_REUSED = "key_reused"


@dataclass(frozen=True, slots=True)
class FailedOperation:
    """The facts of a `failed` operation the decision rests on."""

    code: str | None
    fingerprint: str
    auth_hash: str | None
    executions: int
    max_executions: int
    retry_after_ms: int | None
    failed_at: datetime


def failed_operation(operation: OperationRecord, stored: ErrorEnvelope | None) -> FailedOperation:
    """The facts of a `failed` row; `stored` is its envelope as admitted, whose code decides (an
    envelope that failed closed is UNKNOWN_ERROR: terminal for the key)."""
    return FailedOperation(
        code=operation.last_code if stored is None else stored.code,
        fingerprint=operation.fingerprint,
        auth_hash=operation.auth_hash,
        executions=operation.executions,
        max_executions=operation.max_executions,
        retry_after_ms=None if stored is None else stored.retry_after_ms,
        failed_at=operation.updated_at,
    )


def waits_for_delay(failed: FailedOperation) -> bool:
    """Whether deciding needs the ledger's clock: a stated delay is waited out on the clock that
    stamped the failure; with none, the failure's own time is as late as any (no round trip)."""
    return bool(failed.retry_after_ms)


def stored_failure(stored: ErrorEnvelope | None, codes: CodeRegistry) -> ErrorEnvelope:
    """What an unchanged repeat gets: the stored failure, or UNKNOWN_ERROR for a row without."""
    if stored is not None:
        return stored
    return codes.envelope(Code.UNKNOWN_ERROR, "failed", cause=Untrusted.NO_STORED_FAILURE)


def decide_continuation(
    failed: FailedOperation,
    *,
    fingerprint: str,
    auth_hash: str | None,
    now: datetime,
    codes: CodeRegistry,
) -> Continuation:
    """The continuation policy of DESIGN.md, in one function, keyed on the stored code's verdict:
    a registered code behaves exactly like the built-ins of the same verdict."""
    verdict = _verdict(failed.code, codes)
    payload_changed = fingerprint != failed.fingerprint
    if verdict is not None and verdict.next_action is NextAction.CORRECT_INPUT:
        wants = payload_changed
    elif payload_changed:
        return Continuation.KEY_REUSED
    elif verdict is None:
        wants = False
    elif verdict.next_action is NextAction.AUTHENTICATE:
        wants = auth_hash is not None and auth_hash != failed.auth_hash
    else:
        wants = _retry_due(failed, verdict, now)
    if not wants or failed.executions >= failed.max_executions:
        return Continuation.STORED_FAILURE
    return Continuation.CONTINUE


def _verdict(code: str | None, codes: CodeRegistry) -> Verdict | None:
    if code is None:
        return None
    try:
        return codes.verdict(code)
    except UnknownCode:
        return None


def _retry_due(failed: FailedOperation, verdict: Verdict, now: datetime) -> bool:
    # A retryable no-effect code left budget behind (e.g. the dependency's retry budget was
    # empty): a later call may try again once the stated delay has passed.
    if not verdict.retryable or verdict.side_effects is not SideEffects.NONE:
        return False
    delay = timedelta(milliseconds=failed.retry_after_ms or 0)
    return now >= failed.failed_at + delay
