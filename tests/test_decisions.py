"""The pure decisions of the guard and the reconciler, as tables: no server, no I/O.

Each row of a table is one set of facts and the value the decision must return for it.
"""

from __future__ import annotations

import ast
import inspect
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from writesafe.ledger import LEASE_EXPIRED, OperationRecord, Status
from writesafe.reconciler import (
    CODES,
    Check,
    Code,
    Established,
    LookupOutcome,
    ProvenAbsent,
    RowAction,
    StillUnknown,
    _absence,
    _continuation,
    _decisions,
    decide_row,
    judge_lookup,
)

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


@pytest.mark.parametrize("module", [_decisions, _continuation, _absence])
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
