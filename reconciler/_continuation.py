"""May a later call with the same key run the write again after a `failed` operation?

Only with evidence of the change the stored code asks for, and only while the execution budget
lasts. Everything else returns the stored failure without executing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from reconciler._contract import Code, CodeRegistry, UnknownCode


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


def decide_continuation(
    failed: FailedOperation,
    *,
    fingerprint: str,
    auth_hash: str | None,
    now: datetime,
    codes: CodeRegistry,
) -> Continuation:
    """The continuation policy of DESIGN.md, in one function."""
    payload_changed = fingerprint != failed.fingerprint
    if failed.code == Code.INPUT_INVALID:
        wants = payload_changed
    elif payload_changed:
        return Continuation.KEY_REUSED
    elif failed.code == Code.AUTH_REQUIRED:
        wants = auth_hash is not None and auth_hash != failed.auth_hash
    else:
        wants = _retry_due(failed, now, codes)
    if not wants or failed.executions >= failed.max_executions:
        return Continuation.STORED_FAILURE
    return Continuation.CONTINUE


def _retry_due(failed: FailedOperation, now: datetime, codes: CodeRegistry) -> bool:
    # A retryable no-effect code left budget behind (e.g. the dependency's retry budget was
    # empty): a later call may try again once the stated delay has passed.
    if failed.code is None:
        return False
    try:
        verdict = codes.verdict(failed.code)
    except UnknownCode:
        return False
    if not verdict.retryable or failed.code in (Code.IN_PROGRESS, Code.RETRY_EXHAUSTED):
        return False
    delay = timedelta(milliseconds=failed.retry_after_ms or 0)
    return now >= failed.failed_at + delay
