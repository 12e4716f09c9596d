"""The actionability profile of docs/contract.md, checked on what the emitters really emit.

Every failure writesafe emits is scored in the control view — typed fields only, `message`
opaque — in each of its renderings (the exception's envelope, the MCP result read back, the
problem+json body read back): D (detected), P (coarse policy), C (specific cause), R (replay
constraints) must all be 1, and T (what is at fault) must be 1 wherever a field, a credential or
a dependency is. The envelopes come from the emitting functions themselves, not from copies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import httpx
import pytest

from writesafe import WriteSafeError
from writesafe.idempotency._gate import _unknown
from writesafe.ledger import LEASE_EXPIRED, OperationRecord, Status
from writesafe.reconciler import (
    CODES,
    DEFAULT_ADAPTER,
    Classification,
    Code,
    DownstreamError,
    ErrorEnvelope,
    Lost,
    NextAction,
    ResponseAdapter,
    RetryPolicy,
    Rule,
    SideEffects,
    ToolError,
    Unsettled,
    Untrusted,
    from_call_tool_result,
    from_problem,
    to_call_tool_result,
    to_problem,
)
from writesafe.reconciler._absence import after_absence
from writesafe.reconciler._adapters import failure_of
from writesafe.reconciler._causes import KEY_STORE, LEDGER, LedgerCause
from writesafe.reconciler._continuation import stored_failure
from writesafe.reconciler._failures import after_failure, cut_short, not_stored
from writesafe.reconciler._refusals import (
    in_progress,
    key_reused,
    ledger_lost,
    unrecorded,
    write_not_started,
)
from writesafe.reconciler._views import operation_info
from writesafe.service._problems import unavailable

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ROW = OperationRecord(
    id=1,
    scope="default",
    key="ord-7",
    tool="submit",
    fingerprint="f" * 64,
    status=Status.OUTCOME_UNKNOWN,
    version=2,
    lease_owner=None,
    lease_expires_at=None,
    executions=1,
    max_executions=3,
    arguments="{}",
    auth_hash=None,
    result=None,
    error=None,
    last_code=Code.OUTCOME_UNKNOWN,
    last_sent_at=NOW,
    checks=0,
    next_check_at=None,
    created_at=NOW,
    updated_at=NOW,
)

# What may be at fault, and how the typed fields must name it.
FIELD, CREDENTIAL, STORE, DEPENDENCY, OPERATION, NOTHING = (
    "field",
    "credential",
    "store",
    "dependency",
    "operation",
    "nothing",
)
# Codes that say what happened only with their `cause` (the others are specific by themselves).
NEEDS_CAUSE = {Code.UNKNOWN_ERROR, Code.OUTCOME_UNKNOWN, Code.RETRY_EXHAUSTED}
CAUSES = (
    {c.value for c in Untrusted}
    | {c.value for c in Lost}
    | {c.value for c in Unsettled}
    | {LEDGER, KEY_STORE}
    | {c.value for c in LedgerCause}
)


@dataclass(frozen=True)
class Profile:
    d: int
    p: int
    c: int
    t: int
    r: int


def profile(envelope: ErrorEnvelope, at_fault: str) -> Profile:
    """The score of `envelope`'s typed fields, as docs/contract.md defines each part."""
    detected = envelope.code in CODES
    policy = envelope.next_action in set(NextAction)
    typed_cause = envelope.cause is None or envelope.cause in CAUSES or envelope.cause in CODES
    cause = typed_cause and (envelope.code not in NEEDS_CAUSE or envelope.cause is not None)
    target = {
        FIELD: envelope.field is not None,
        CREDENTIAL: envelope.next_action in {NextAction.AUTHENTICATE, NextAction.STOP},
        STORE: envelope.cause in {LEDGER, KEY_STORE, *LedgerCause},
        # The called tool's dependency: what its adapter saw, named by code (and cause).
        DEPENDENCY: envelope.code not in NEEDS_CAUSE or envelope.cause is not None,
        OPERATION: envelope.operation is not None,
        NOTHING: True,
    }[at_fault]
    replay = envelope.side_effects is not None and (
        not envelope.retryable or envelope.retry_after_ms is not None
    )
    return Profile(int(detected), int(policy), int(cause), int(target), int(replay))


def renderings(envelope: ErrorEnvelope) -> dict[str, ErrorEnvelope]:
    """The envelope as each rendering's reader gives it back to software."""
    return {
        "exception": WriteSafeError(envelope).envelope,
        "mcp": from_call_tool_result(to_call_tool_result(envelope)).envelope,
        "mcp-wire": from_call_tool_result(
            to_call_tool_result(envelope).model_dump(mode="json", by_alias=True)
        ).envelope,
        "problem+json": from_problem(to_problem(envelope).body).envelope,
    }


def _cut(**facts: bool) -> ErrorEnvelope:
    seen = cut_short(
        **{
            "lease_lost": False,
            "sent_before": False,
            "fence_closed": False,
            "timed_out": False,
            **facts,
        },
        timeout=2.0,
        codes=CODES,
    )
    assert seen is not None
    return seen.envelope


def _after(code: str, executions: int, allowed: bool) -> ErrorEnvelope:
    decision = after_failure(
        Classification(CODES.envelope(code, "busy")),
        executions=executions,
        max_executions=3,
        retry_allowed=lambda: allowed,
        policy=RetryPolicy(),
        codes=CODES,
    )
    return decision.envelope


def _served(store: str) -> ErrorEnvelope:
    body = json.loads(unavailable("down", store).body)
    return from_problem(body).envelope


def _raised(error: BaseException) -> ErrorEnvelope:
    return failure_of(DEFAULT_ADAPTER, error, CODES).envelope


def _answered(status: int) -> ErrorEnvelope:
    adapter = ResponseAdapter("shop", "1", rules=(Rule(Code.INPUT_INVALID, status=422),))
    return failure_of(adapter, DownstreamError(status, '{"x": 1}'), CODES).envelope


def _stored(outcome_error: str | None) -> ErrorEnvelope:
    assert outcome_error is not None
    return ErrorEnvelope.model_validate_json(outcome_error)


def _absent(**changes: object) -> ErrorEnvelope:
    return after_absence(replace(ROW, **changes), CODES).envelope  # type: ignore[arg-type]


INFO = operation_info(ROW)
FAILED_ROW = replace(ROW, status=Status.FAILED)
EMITTED: list[tuple[str, ErrorEnvelope, str]] = [
    # the tool's own failures, as its adapter classifies them
    ("ToolError INPUT_INVALID", _raised(ToolError("INPUT_INVALID", "bad", field="sku")), FIELD),
    ("ToolError AUTH_REQUIRED", _raised(ToolError("AUTH_REQUIRED", "log in")), CREDENTIAL),
    ("ToolError ACCESS_DENIED", _raised(ToolError("ACCESS_DENIED", "no")), CREDENTIAL),
    ("connection lost after sending", _raised(httpx.ReadTimeout("slow")), DEPENDENCY),
    ("unclassified exception", _raised(RuntimeError("boom")), NOTHING),
    ("no rule for the answer", _answered(500), NOTHING),
    ("the door refused an envelope", _raised(ToolError("ACCESS_DENIED", "x", field="p")), NOTHING),
    # the guard's own
    ("fenced before any send", _cut(lease_lost=True), DEPENDENCY),
    ("fence closed after the send", _cut(lease_lost=True, sent_before=True), DEPENDENCY),
    ("timed out", _cut(timed_out=True), DEPENDENCY),
    ("budget spent", _after(Code.DEPENDENCY_BUSY, 3, True), DEPENDENCY),
    ("retry throttled", _after(Code.RATE_LIMITED, 1, False), DEPENDENCY),
    ("key reused", key_reused("ord-7", "submit", INFO, CODES), FIELD),
    ("in progress", in_progress("ord-7", None, 3, None, CODES), OPERATION),
    ("ledger down before the write", write_not_started(CODES, LedgerCause.UNREACHABLE), STORE),
    ("ledger misconfigured", write_not_started(CODES, LedgerCause.MISCONFIGURED), STORE),
    (
        "ledger down deciding a failed row",
        ledger_lost(replace(ROW, status=Status.FAILED), CODES, LedgerCause.BUSY),
        STORE,
    ),
    (
        "ledger down deciding an unknown row",
        ledger_lost(ROW, CODES, LedgerCause.UNREACHABLE),
        STORE,
    ),
    ("outcome not recorded", unrecorded(ROW, CODES), STORE),
    ("result not stored", _stored(not_stored("too large", {}, CODES).error), NOTHING),
    ("no stored failure", stored_failure(None, CODES), NOTHING),
    # the replay gate, answering an unknown outcome again
    *(
        (f"still unknown: {why}", _unknown(CODES, ROW, why, "why").envelope, DEPENDENCY)
        for why in Unsettled
    ),
    # proven absence (the gate and reconciliation)
    ("absent after a lost send", _absent(), DEPENDENCY),
    (
        "absent after a lost lease, budget spent",
        _absent(last_code=LEASE_EXPIRED, executions=3),
        DEPENDENCY,
    ),
    ("absent after an unclassified failure", _absent(last_code=Code.UNKNOWN_ERROR), NOTHING),
    # the HTTP service's own answers
    ("service: ledger down", _served(LEDGER), STORE),
    ("service: key store down", _served(KEY_STORE), STORE),
]

FULL = Profile(1, 1, 1, 1, 1)


@pytest.mark.parametrize(("label", "envelope", "at_fault"), EMITTED, ids=[e[0] for e in EMITTED])
def test_every_failure_scores_full_in_every_rendering(
    label: str, envelope: ErrorEnvelope, at_fault: str
) -> None:
    for rendering, read in renderings(envelope).items():
        if _proven_no_effect(envelope) and rendering != "exception":
            # A reader cannot know that writesafe's own rule proved it: it stays "unknown".
            assert (read.code, read.cause) == (Code.UNKNOWN_ERROR, Untrusted.UNPROVEN_NO_EFFECT)
        else:
            typed = read.model_dump(exclude={"message"})
            assert typed == envelope.model_dump(exclude={"message"}), rendering
        assert profile(read, at_fault) == FULL, (label, rendering, read)


def _proven_no_effect(envelope: ErrorEnvelope) -> bool:
    return envelope.code == Code.UNKNOWN_ERROR and envelope.side_effects is SideEffects.NONE


def test_the_scorer_sees_the_zeros_it_is_for() -> None:
    bare_unknown = CODES.envelope(Code.OUTCOME_UNKNOWN, "?")
    assert profile(bare_unknown, DEPENDENCY).c == 0
    assert profile(CODES.envelope(Code.TEMP_UNAVAILABLE, "down"), STORE).t == 0
    assert profile(CODES.envelope(Code.TEMP_UNAVAILABLE, "down"), DEPENDENCY).r == 0  # when?
    assert profile(CODES.envelope(Code.INPUT_INVALID, "bad"), FIELD).t == 0
    assert profile(CODES.envelope(Code.RETRY_EXHAUSTED, "gave up"), DEPENDENCY).c == 0
