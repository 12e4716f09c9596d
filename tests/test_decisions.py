"""The pure decisions of the guard and the reconciler, as tables: no server, no I/O.

Each row of a table is one set of facts and the value the decision must return for it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from writesafe.ledger import LEASE_EXPIRED, OperationRecord, Outcome, Status, dumps_json
from writesafe.reconciler import (
    CODES,
    Classification,
    Code,
    ErrorEnvelope,
    Lost,
    RetryPolicy,
    SideEffects,
    Untrusted,
    _absence,
    _admission,
    _continuation,
    _decisions,
    _failures,
    _refusals,
)
from writesafe.reconciler._admission import admit_stored, disagreement, stored_envelope
from writesafe.reconciler._causes import LEDGER, LedgerCause
from writesafe.reconciler._check import Check, LookupOutcome
from writesafe.reconciler._continuation import failed_operation, stored_failure, waits_for_delay
from writesafe.reconciler._decisions import (
    FIRST_POLL_SECONDS,
    Established,
    Poll,
    ProvenAbsent,
    RowAction,
    StillUnknown,
    committed_earlier,
    decide_row,
    held_for_ms,
    judge_lookup,
    next_poll,
)
from writesafe.reconciler._failures import after_failure, cut_short, failure_outcome, not_stored
from writesafe.reconciler._refusals import (
    in_progress,
    key_reused,
    ledger_lost,
    unrecorded,
    write_not_started,
)
from writesafe.reconciler._views import operation_info

NOW = datetime(2026, 1, 1, tzinfo=UTC)
MINE, THEIRS = "owner-mine", "owner-theirs"
SAME, OTHER = "f" * 64, "0" * 64


def row(
    status: Status,
    *,
    owner: str | None = THEIRS,
    fingerprint: str = SAME,
    executions: int = 1,
    last_code: str | None = None,
) -> OperationRecord:
    return OperationRecord(
        id=1,
        scope="default",
        key="k",
        tool="submit",
        fingerprint=fingerprint,
        status=status,
        version=1,
        lease_owner=owner,
        lease_expires_at=NOW + timedelta(seconds=15),
        executions=executions,
        max_executions=3,
        arguments="{}",
        auth_hash=None,
        result='"r"' if status is Status.SUCCEEDED else None,
        error=None,
        last_code=last_code,
        last_sent_at=NOW,
        checks=0,
        next_check_at=None,
        created_at=NOW,
        updated_at=NOW,
    )


ROWS = [
    # status, created, owner, fingerprint → action
    (Status.IN_FLIGHT, True, MINE, SAME, RowAction.EXECUTE),
    (Status.IN_FLIGHT, False, MINE, SAME, RowAction.EXECUTE),  # a retried claim that landed
    (Status.IN_FLIGHT, False, THEIRS, SAME, RowAction.JUDGE_LEASE),
    (Status.IN_FLIGHT, False, THEIRS, OTHER, RowAction.KEY_REUSED),
    (Status.SUCCEEDED, False, None, SAME, RowAction.REPLAY),
    (Status.SUCCEEDED, False, None, OTHER, RowAction.KEY_REUSED),
    (Status.FAILED, False, None, SAME, RowAction.CONTINUE),
    (Status.FAILED, False, None, OTHER, RowAction.CONTINUE),  # a corrected input may continue
    (Status.OUTCOME_UNKNOWN, False, None, SAME, RowAction.ASK_LOOKUP),
    (Status.OUTCOME_UNKNOWN, False, None, OTHER, RowAction.KEY_REUSED),
    (Status.NEEDS_ATTENTION, False, None, SAME, RowAction.ASK_LOOKUP),
    (Status.NEEDS_ATTENTION, False, None, OTHER, RowAction.KEY_REUSED),
]


@pytest.mark.parametrize(("status", "created", "owner", "fingerprint", "action"), ROWS)
def test_a_found_row_decides_the_call(
    status: Status, created: bool, owner: str | None, fingerprint: str, action: RowAction
) -> None:
    found = row(status, owner=owner)
    assert decide_row(found, created=created, owner=MINE, fingerprint=fingerprint) is action


def test_every_status_has_a_row_in_the_table() -> None:
    assert {status for status, *_ in ROWS} == set(Status)


def check(outcome: LookupOutcome, *, settling: bool = False) -> Check:
    return Check(
        outcome,
        NOW,
        result='"found"' if outcome is LookupOutcome.FOUND else None,
        settles_at=NOW + timedelta(seconds=5) if settling else None,
    )


def test_a_found_effect_is_established_with_its_result() -> None:
    verdict = judge_lookup(check(LookupOutcome.FOUND), row(Status.OUTCOME_UNKNOWN), CODES)
    assert verdict == Established('"found"')


@pytest.mark.parametrize(
    ("last_code", "executions", "continues", "code"),
    [
        (LEASE_EXPIRED, 1, True, Code.TEMP_UNAVAILABLE),  # a crashed or stalled writer
        (Code.OUTCOME_UNKNOWN, 2, True, Code.TEMP_UNAVAILABLE),  # sent, answer lost
        (Code.OUTCOME_UNKNOWN, 3, False, Code.RETRY_EXHAUSTED),  # the budget is spent
        (Code.UNKNOWN_ERROR, 1, False, Code.UNKNOWN_ERROR),  # unclassified: terminal
    ],
)
def test_proven_absence_continues_only_a_lost_send_within_budget(
    last_code: str, executions: int, continues: bool, code: str
) -> None:
    unknown = row(Status.OUTCOME_UNKNOWN, last_code=last_code, executions=executions)
    verdict = judge_lookup(check(LookupOutcome.NOT_FOUND), unknown, CODES)
    assert isinstance(verdict, ProvenAbsent)
    assert (verdict.absence.continues, verdict.absence.envelope.code) == (continues, code)


@pytest.mark.parametrize("settling", [True, False])
def test_anything_else_is_still_unknown_and_says_whether_it_is_settling(settling: bool) -> None:
    verdict = judge_lookup(
        check(LookupOutcome.UNKNOWN, settling=settling), row(Status.OUTCOME_UNKNOWN), CODES
    )
    assert verdict == StillUnknown(settling=settling)


IO_MODULES = {"asyncio", "sqlalchemy", "asyncpg", "aiosqlite", "redis", "httpx", "socket", "time"}


DECISIONS = [_decisions, _continuation, _absence, _failures, _refusals, _admission]


@pytest.mark.parametrize("module", DECISIONS)
def test_decisions_import_no_io_and_never_await(module: object) -> None:
    source = Path(inspect.getfile(module)).read_text()  # type: ignore[arg-type]
    tree = ast.parse(source)
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported & IO_MODULES == set()
    assert not any(isinstance(node, ast.AsyncFunctionDef) for node in ast.walk(tree))


# -- how a failed execution ends -----------------------------------------------------------

CUTS = [
    # lease_lost, sent_before, fence_closed, timed_out → code, cause, side effects
    (True, False, False, False, Code.TEMP_UNAVAILABLE, None, SideEffects.NONE),  # nothing sent
    (True, True, False, False, Code.OUTCOME_UNKNOWN, Lost.INTERRUPTED, SideEffects.UNKNOWN),
    (False, False, True, False, Code.OUTCOME_UNKNOWN, Lost.INTERRUPTED, SideEffects.UNKNOWN),
    (False, False, True, True, Code.OUTCOME_UNKNOWN, Lost.INTERRUPTED, SideEffects.UNKNOWN),
    (False, False, False, True, Code.OUTCOME_UNKNOWN, Lost.TIMEOUT, SideEffects.UNKNOWN),
    (False, False, False, False, None, None, None),
]


@pytest.mark.parametrize(
    ("lease_lost", "sent_before", "fence_closed", "timed_out", "code", "cause", "effects"), CUTS
)
def test_an_execution_the_guard_cut_short_is_classified_by_what_was_sent(
    lease_lost: bool,
    sent_before: bool,
    fence_closed: bool,
    timed_out: bool,
    code: str | None,
    cause: str | None,
    effects: SideEffects | None,
) -> None:
    seen = cut_short(
        lease_lost=lease_lost,
        sent_before=sent_before,
        fence_closed=fence_closed,
        timed_out=timed_out,
        timeout=2.0,
        codes=CODES,
    )
    if code is None:  # not the guard's doing: the adapter judges
        assert seen is None
        return
    assert seen is not None
    envelope = seen.envelope
    assert (envelope.code, envelope.cause, envelope.side_effects) == (code, cause, effects)
    assert disagreement(envelope, CODES, proven=True) is None


def failure(code: str, *, retry_after_ms: int | None = None) -> Classification:
    return Classification(
        CODES.envelope(code, "said so", retry_after_ms=retry_after_ms, field=_field(code)),
        {"said": "so"},
    )


def _field(code: str) -> str | None:
    return "sku" if CODES.verdict(code).names_field else None


AFTER = [
    # code, executions, budget allows → retry, recorded status, answered code, throttled, asked
    (Code.TEMP_UNAVAILABLE, 1, True, True, Status.FAILED, Code.TEMP_UNAVAILABLE, False, True),
    (Code.TEMP_UNAVAILABLE, 1, False, False, Status.FAILED, Code.TEMP_UNAVAILABLE, True, True),
    (Code.TEMP_UNAVAILABLE, 3, True, False, Status.FAILED, Code.RETRY_EXHAUSTED, False, True),
    (Code.RATE_LIMITED, 3, False, False, Status.FAILED, Code.RETRY_EXHAUSTED, False, True),
    (Code.INPUT_INVALID, 1, True, False, Status.FAILED, Code.INPUT_INVALID, False, False),
    (
        Code.OUTCOME_UNKNOWN,
        1,
        True,
        False,
        Status.OUTCOME_UNKNOWN,
        Code.OUTCOME_UNKNOWN,
        False,
        False,
    ),
    (Code.UNKNOWN_ERROR, 1, True, False, Status.OUTCOME_UNKNOWN, Code.UNKNOWN_ERROR, False, False),
]


@pytest.mark.parametrize(
    ("code", "executions", "allows", "retry", "status", "answered", "throttled", "asked"), AFTER
)
def test_a_failed_execution_retries_only_without_effect_within_both_budgets(
    code: str,
    executions: int,
    allows: bool,
    retry: bool,
    status: Status,
    answered: str,
    throttled: bool,
    asked: bool,
) -> None:
    tokens: list[bool] = []

    def retry_allowed() -> bool:
        tokens.append(allows)
        return allows

    decision = after_failure(
        failure(code),
        executions=executions,
        max_executions=3,
        retry_allowed=retry_allowed,
        policy=RetryPolicy(),
        codes=CODES,
    )
    assert (decision.retry, decision.outcome.status, decision.envelope.code) == (
        retry,
        status,
        answered,
    )
    assert decision.throttled is throttled
    assert bool(tokens) is asked  # the dependency's budget pays for every retryable failure
    assert decision.outcome.code == answered
    assert decision.outcome.evidence == '{"said":"so"}'


def test_an_exhausted_budget_keeps_the_last_answer_on_its_attempt() -> None:
    decision = after_failure(
        failure(Code.DEPENDENCY_BUSY),
        executions=3,
        max_executions=3,
        retry_allowed=lambda: True,
        policy=RetryPolicy(),
        codes=CODES,
    )
    assert decision.envelope.cause == Code.DEPENDENCY_BUSY
    assert decision.outcome.attempt_code == Code.DEPENDENCY_BUSY
    assert decision.outcome.attempt_error is not None
    assert '"DEPENDENCY_BUSY"' in decision.outcome.attempt_error


def test_a_throttled_failure_says_when_to_come_back_and_keeps_a_stated_delay() -> None:
    stated = after_failure(
        failure(Code.RATE_LIMITED, retry_after_ms=7_000),
        executions=1,
        max_executions=3,
        retry_allowed=lambda: False,
        policy=RetryPolicy(),
        codes=CODES,
    )
    backoff = after_failure(
        failure(Code.RATE_LIMITED),
        executions=2,
        max_executions=3,
        retry_allowed=lambda: False,
        policy=RetryPolicy(initial=0.1),
        codes=CODES,
    )
    assert (stated.envelope.retry_after_ms, backoff.envelope.retry_after_ms) == (7_000, 400)
    assert '"retry_after_ms":400' in (backoff.outcome.error or "")


def test_a_result_that_cannot_be_stored_succeeds_without_it() -> None:
    outcome = not_stored("too large", {"reason": "too_large"}, CODES)
    assert (outcome.status, outcome.code, outcome.result) == (
        Status.SUCCEEDED,
        Code.RESULT_NOT_STORED,
        None,
    )
    assert outcome.evidence == '{"reason":"too_large"}'
    assert failure_outcome(failure(Code.INPUT_INVALID)).status is Status.FAILED


# -- the answers of a call that does not execute ----------------------------------------------


def test_the_refusals_name_the_operation_and_the_dependency_at_fault() -> None:
    failed, unknown = row(Status.FAILED), row(Status.OUTCOME_UNKNOWN)
    reused = key_reused("k", "submit", operation_info(failed), CODES)
    assert (reused.code, reused.field, reused.operation) == (
        Code.KEY_REUSED,
        "idempotency_key",
        operation_info(failed),
    )
    not_started = write_not_started(CODES, LedgerCause.UNREACHABLE)
    assert (not_started.code, not_started.cause, not_started.side_effects) == (
        Code.TEMP_UNAVAILABLE,
        "ledger_unreachable",
        SideEffects.NONE,
    )
    # A failed row: no effect
    assert ledger_lost(failed, CODES, LedgerCause.BUSY).code == Code.TEMP_UNAVAILABLE
    lost = ledger_lost(unknown, CODES, LedgerCause.UNREACHABLE)
    assert (lost.code, lost.cause, lost.retry_after_ms) == (
        Code.OUTCOME_UNKNOWN,
        "ledger_unreachable",
        1_000,
    )
    gone = unrecorded(unknown, CODES)
    assert (gone.code, gone.cause, gone.retry_after_ms) == (Code.OUTCOME_UNKNOWN, LEDGER, None)
    for envelope in (reused, not_started, lost, gone):
        assert disagreement(envelope, CODES, proven=False) is None


@pytest.mark.parametrize(
    ("found", "retry_after_ms", "attempt", "left", "wait"),
    [
        (None, None, 0, 3, 1_000),  # nothing read back: as much as the waiting call knows
        (row(Status.IN_FLIGHT, executions=2), 250, 2, 1, 250),
    ],
)
def test_in_progress_names_the_operation_even_when_the_ledger_is_silent(
    found: OperationRecord | None, retry_after_ms: int | None, attempt: int, left: int, wait: int
) -> None:
    envelope = in_progress("k", found, 3, retry_after_ms, CODES)
    assert envelope.operation is not None
    assert (envelope.operation.key, envelope.operation.attempt) == ("k", attempt)
    assert (envelope.operation.attempts_left, envelope.retry_after_ms) == (left, wait)


# -- waiting on a busy key ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds_left", "wait_ms"), [(0, 50), (0.01, 50), (1.5, 1_500), (60, 5_000)]
)
def test_a_held_lease_is_polled_within_bounds(seconds_left: float, wait_ms: int) -> None:
    assert held_for_ms(seconds_left) == wait_ms


@pytest.mark.parametrize(
    ("busy_ms", "pause", "remaining", "poll"),
    [
        (50, 0.002, 1.0, Poll(0.002, 0.004)),
        (50, 0.04, 1.0, Poll(0.04, 0.05)),  # the pause is capped
        (50, 0.05, 0.01, Poll(0.01, 0.05)),  # never past the call's wait
        (0, 0.008, 1.0, Poll(0.0, 0.008)),  # the row changed: at once, the pause kept
        (50, 0.002, 0.0, None),  # the wait is over: IN_PROGRESS
        (0, 0.002, -1.0, None),
    ],
)
def test_a_busy_key_is_polled_with_backoff_until_the_wait_is_over(
    busy_ms: int, pause: float, remaining: float, poll: Poll | None
) -> None:
    assert next_poll(busy_ms, pause, remaining) == poll
    assert FIRST_POLL_SECONDS == 0.002


def test_a_retried_finish_recognises_only_its_own_commit() -> None:
    sent = row(Status.IN_FLIGHT)
    outcome = Outcome(Status.SUCCEEDED, result='"r"')
    committed = dataclasses.replace(sent, version=2, status=Status.SUCCEEDED, result='"r"')
    assert committed_earlier(committed, sent, outcome)
    assert not committed_earlier(None, sent, outcome)
    assert not committed_earlier(dataclasses.replace(committed, version=3), sent, outcome)
    assert not committed_earlier(dataclasses.replace(committed, result='"x"'), sent, outcome)


# -- the facts of a failed row, and the door of stored envelopes -------------------------------


def stored(envelope: ErrorEnvelope) -> OperationRecord:
    return dataclasses.replace(
        row(Status.FAILED, last_code=envelope.code), error=dumps_json(envelope.to_json_dict())
    )


def test_a_failed_row_is_decided_by_its_admitted_envelope() -> None:
    busy = CODES.envelope(Code.DEPENDENCY_BUSY, "busy", retry_after_ms=2_000)
    facts = failed_operation(stored(busy), busy)
    assert (facts.code, facts.retry_after_ms, waits_for_delay(facts)) == (
        Code.DEPENDENCY_BUSY,
        2_000,
        True,
    )
    bare = failed_operation(row(Status.FAILED, last_code=Code.INPUT_INVALID), None)
    assert (bare.code, waits_for_delay(bare)) == (Code.INPUT_INVALID, False)
    assert stored_failure(busy, CODES) is busy
    missing = stored_failure(None, CODES)
    assert (missing.code, missing.cause) == (Code.UNKNOWN_ERROR, Untrusted.NO_STORED_FAILURE)


EDITED = [
    # the stored envelope's JSON, edited → why it fails closed
    ({"code": "INPUT_INVALID", "field": "sku", "retryable": True}, Untrusted.VERDICT_CONTRADICTED),
    ({"code": "ACCESS_DENIED", "field": "postcode"}, Untrusted.FIELD_UNEXPECTED),
    ({"code": "INPUT_INVALID", "field": None}, Untrusted.FIELD_MISSING),
    ({"code": "NO_SUCH_CODE"}, Untrusted.UNREGISTERED_CODE),
    ({"retry_after_ms": 10**12}, Untrusted.DELAY_OUT_OF_RANGE),
    ({"schema": "other/9"}, Untrusted.INVALID_ENVELOPE),
]


@pytest.mark.parametrize(("edit", "reason"), EDITED)
def test_a_stored_envelope_that_disagrees_fails_closed(
    edit: dict[str, object], reason: Untrusted, caplog: pytest.LogCaptureFixture
) -> None:
    original = CODES.envelope(Code.ACCESS_DENIED, "no", retry_after_ms=None)
    edited = {**original.to_json_dict(), **edit}
    if edit.get("code") == "INPUT_INVALID":
        edited["next_action"] = "correct_input"
    text = dumps_json(edited)
    admitted = admit_stored(text, CODES, source="default/k")
    assert (admitted.code, admitted.cause, admitted.retryable) == (
        Code.UNKNOWN_ERROR,
        reason,
        False,
    )
    assert admitted.side_effects is SideEffects.UNKNOWN
    assert text in caplog.text  # the raw evidence, logged (the row itself keeps it)
    facts = failed_operation(stored(original), admitted)
    assert facts.code == Code.UNKNOWN_ERROR  # terminal for the key


def test_a_stored_envelope_that_agrees_is_itself() -> None:
    narrowed = CODES.envelope(Code.UNKNOWN_ERROR, "no effect", side_effects=SideEffects.NONE)
    for envelope in (CODES.envelope(Code.INPUT_INVALID, "bad", field="sku"), narrowed):
        assert admit_stored(dumps_json(envelope.to_json_dict()), CODES, source="s/k") == envelope
    assert stored_envelope(row(Status.FAILED), CODES) is None
