"""How a failed execution ends, as values: what the guard saw, what the ledger records, what next.

Pure decisions, no I/O. The guard names the facts (did the fence close, did the deadline pass),
asks `cut_short` what they mean and, for every other failure, its adapter; then `after_failure`
says whether to execute again and what to record and answer, and the guard carries it out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from writesafe.ledger import Outcome, Status, dumps_json
from writesafe.reconciler._causes import Lost
from writesafe.reconciler._classify import Classification
from writesafe.reconciler._contract import Code, CodeRegistry, ErrorEnvelope, SideEffects
from writesafe.reconciler._retry import RetryPolicy, exhausted

FENCED_RETRY_AFTER_MS = 1_000
"""When to come back after a send the fence refused: a lease lost to a stall is soon taken over."""


def cut_short(
    *,
    lease_lost: bool,
    sent_before: bool,
    fence_closed: bool,
    timed_out: bool,
    timeout: float | None,
    codes: CodeRegistry,
) -> Classification | None:
    """The failure when the guard itself ended the execution, else None (the adapter judges).

    `lease_lost`: the fence refused a send, `sent_before` whether an earlier one had gone out;
    `fence_closed`: the fence cancelled the running write; `timed_out`: the tool's deadline did.
    Only a refusal before any send proves that nothing was sent.
    """
    if lease_lost and not sent_before:
        envelope = codes.envelope(
            Code.TEMP_UNAVAILABLE,
            "this execution's lease may have run out before the write was sent; nothing was sent",
            retry_after_ms=FENCED_RETRY_AFTER_MS,
            side_effects=SideEffects.NONE,
        )
        return Classification(envelope, {"fence": "refused before any send"})
    if lease_lost or fence_closed:
        message = (
            "this execution's lease ran out while the write ran (a stall, or renewals that "
            "failed); it may have been applied"
        )
        envelope = codes.envelope(Code.OUTCOME_UNKNOWN, message, cause=Lost.INTERRUPTED)
        return Classification(envelope, {"fence": "closed after the write started"})
    if timed_out:
        message = f"the write did not finish within {timeout}s; it may have been applied"
        envelope = codes.envelope(Code.OUTCOME_UNKNOWN, message, cause=Lost.TIMEOUT)
        return Classification(envelope, {"timeout_seconds": timeout})
    return None


def failure_outcome(classification: Classification) -> Outcome:
    """What the ledger records for a failed execution: `failed` where no effect is proven."""
    envelope = classification.envelope
    no_effect = envelope.side_effects is SideEffects.NONE
    return Outcome(
        status=Status.FAILED if no_effect else Status.OUTCOME_UNKNOWN,
        error=dumps_json(envelope.to_json_dict()),
        code=envelope.code,
        evidence=dumps_json(classification.evidence),
    )


def not_stored(detail: str, evidence: dict[str, Any], codes: CodeRegistry) -> Outcome:
    """The write ran but its result cannot be kept: the operation succeeds without one, and
    every caller with the key gets the same RESULT_NOT_STORED envelope instead of it."""
    envelope = codes.envelope(
        Code.RESULT_NOT_STORED,
        f"the write was applied, but its result was not stored: {detail}",
    )
    return Outcome(
        status=Status.SUCCEEDED,
        error=dumps_json(envelope.to_json_dict()),
        code=envelope.code,
        evidence=dumps_json(evidence),
    )


@dataclass(frozen=True, slots=True)
class AfterFailure:
    """`retry`: record `outcome` (failed, no effect), wait, and execute again; otherwise record
    `outcome` and answer `envelope`. `throttled`: the dependency's retry budget refused."""

    retry: bool
    outcome: Outcome
    envelope: ErrorEnvelope
    throttled: bool = False


def after_failure(
    classification: Classification,
    *,
    executions: int,
    max_executions: int,
    retry_allowed: Callable[[], bool],
    policy: RetryPolicy,
    codes: CodeRegistry,
) -> AfterFailure:
    """Another execution only for a retryable failure that proved no effect, while the key's
    budget lasts and the dependency's retry budget allows (`retry_allowed` spends a token of it,
    and is asked exactly once for every such failure, the last one included)."""
    envelope = classification.envelope
    outcome = failure_outcome(classification)
    if not envelope.retryable or envelope.side_effects is not SideEffects.NONE:
        return AfterFailure(False, outcome, envelope)
    allowed = retry_allowed()
    if executions >= max_executions:
        # The operation ends RETRY_EXHAUSTED; its last attempt keeps the answer it really got.
        gave_up = exhausted(envelope, executions, codes)
        last = Outcome(
            status=Status.FAILED,
            error=dumps_json(gave_up.to_json_dict()),
            code=gave_up.code,
            evidence=outcome.evidence,
            attempt_error=outcome.error,
            attempt_code=outcome.code,
        )
        return AfterFailure(False, last, gave_up)
    if allowed:
        return AfterFailure(True, outcome, envelope)
    timed = policy.timed(envelope, executions)  # a caller told to come back must learn when
    return AfterFailure(
        False, failure_outcome(Classification(timed, classification.evidence)), timed, True
    )
