"""May a later call with the same key run the write again after a `failed` operation?

Only with evidence of the change the stored code asks for, and only while the execution budget
lasts. Everything else returns the stored failure without executing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from writesafe.reconciler._contract import (
    CodeRegistry,
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
