"""The continuation decision as a table: registered codes behave exactly like the built-ins of
the same verdict (no server; the decision is a pure function)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from writesafe.reconciler import CODES, Code, CodeRegistry
from writesafe.reconciler._continuation import Continuation, FailedOperation, decide_continuation

NOW = datetime(2026, 1, 1, tzinfo=UTC)

# Each user code mirrors one built-in: the same verdict under another name.
TWINS = {
    "INVALID_ARGUMENT": Code.INPUT_INVALID,
    "LOGIN_EXPIRED": Code.AUTH_REQUIRED,
    "FORBIDDEN_HERE": Code.ACCESS_DENIED,
    "BACKEND_DOWN": Code.TEMP_UNAVAILABLE,
    "SHOP_LOCKED": Code.DEPENDENCY_BUSY,
    "SLOW_DOWN": Code.RATE_LIMITED,
    "GAVE_UP": Code.RETRY_EXHAUSTED,
    "NO_IDEA": Code.UNKNOWN_ERROR,
}


def registry() -> CodeRegistry:
    codes = CodeRegistry()
    for code, builtin in TWINS.items():
        codes.register(code, CODES.verdict(builtin))
    return codes


CALLS = {
    "unchanged": ("fp", "auth", NOW),
    "corrected": ("fp2", "auth", NOW),
    "renewed": ("fp", "auth2", NOW),
    "after-delay": ("fp", "auth", NOW + timedelta(seconds=2)),
}


def decide(code: str, call: str, codes: CodeRegistry, executions: int = 1) -> Continuation:
    fingerprint, auth_hash, now = CALLS[call]
    failed = FailedOperation(
        code=code,
        fingerprint="fp",
        auth_hash="auth",
        executions=executions,
        max_executions=3,
        retry_after_ms=1_000,
        failed_at=NOW,
    )
    return decide_continuation(
        failed, fingerprint=fingerprint, auth_hash=auth_hash, now=now, codes=codes
    )


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("code", TWINS)
def test_a_registered_code_continues_like_its_builtin_twin(code: str, call: str) -> None:
    codes = registry()
    for executions in (1, 3):
        assert decide(code, call, codes, executions) == decide(TWINS[code], call, codes, executions)


@pytest.mark.parametrize(
    ("code", "call", "expected"),
    [
        ("INVALID_ARGUMENT", "corrected", Continuation.CONTINUE),
        ("INVALID_ARGUMENT", "unchanged", Continuation.STORED_FAILURE),
        ("LOGIN_EXPIRED", "renewed", Continuation.CONTINUE),
        ("LOGIN_EXPIRED", "corrected", Continuation.KEY_REUSED),
        ("SHOP_LOCKED", "unchanged", Continuation.STORED_FAILURE),  # the delay has not passed
        ("SHOP_LOCKED", "after-delay", Continuation.CONTINUE),
        ("FORBIDDEN_HERE", "renewed", Continuation.STORED_FAILURE),
        ("NO_IDEA", "after-delay", Continuation.STORED_FAILURE),
        ("NEVER_REGISTERED", "corrected", Continuation.KEY_REUSED),
        ("NEVER_REGISTERED", "after-delay", Continuation.STORED_FAILURE),
    ],
)
def test_continuation_table(code: str, call: str, expected: Continuation) -> None:
    assert decide(code, call, registry()) == expected


def test_no_budget_left_returns_the_stored_failure() -> None:
    assert decide("INVALID_ARGUMENT", "corrected", registry(), executions=3) == (
        Continuation.STORED_FAILURE
    )
