"""The guard's hot path: claims, continuations, outcomes and lease renewals.

Every state change is `UPDATE … WHERE id = :id AND version = :version` (plus the lease owner when
an attempt finishes), checked against the state machine first. A writer whose lease was taken
over therefore changes nothing: it sees `None` and must not claim the outcome it observed. Each
write goes through the writer (`ledger._writer`), atomic in one call into the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, update
from sqlalchemy.ext.asyncio import AsyncEngine

from writesafe.ledger._ledger_time import LedgerTime
from writesafe.ledger._records import OperationRecord
from writesafe.ledger._states import Status, check_transition
from writesafe.ledger._writer import Change, Claim, ClosedExecution, Moment, Writer, operations


@dataclass(frozen=True, slots=True)
class Intent:
    """What a caller wants to execute under `(scope, key)`, and the lease it will hold meanwhile."""

    scope: str
    key: str
    tool: str
    fingerprint: str
    arguments: str
    owner: str
    lease_seconds: float
    max_executions: int
    auth_hash: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an execution ended, as recorded on the operation and on its attempt row."""

    status: Status
    result: str | None = None
    error: str | None = None
    code: str | None = None
    evidence: str | None = None
    # What the attempt row records when it differs from the operation's verdict (e.g. the
    # operation ends RETRY_EXHAUSTED while its last attempt saw DEPENDENCY_BUSY).
    attempt_error: str | None = None
    attempt_code: str | None = None

    @property
    def attempt_values(self) -> dict[str, str | None]:
        return {
            "code": self.attempt_code or self.code,
            "envelope": self.attempt_error or self.error,
            "evidence": self.evidence,
        }


_MAY_HAVE_SENT = frozenset({Status.SUCCEEDED, Status.OUTCOME_UNKNOWN})
"""How an execution ended when it may have had an effect."""

LATE_SEND = "LATE_SEND"
"""`last_code` of an operation an execution fenced off reported it may have sent to after all."""


def unknown_from(now: ColumnElement[datetime] | datetime, code: str) -> dict[str, Any]:
    """The values that make an operation `outcome_unknown` (for `code`) with its settle window,
    and its next check, from `now`."""
    return {
        "status": Status.OUTCOME_UNKNOWN.value,
        "last_code": code,
        "last_sent_at": now,
        "next_check_at": now,
        "version": operations.c.version + 1,
        "updated_at": now,
    }


class HotPath(LedgerTime):
    """The guard's writes of one guarded call (`Ledger` composes them)."""

    engine: AsyncEngine
    writer: Writer

    async def claim(self, intent: Intent) -> Claim:
        """Insert the intent as a new `in_flight` operation, or return the row holding the key.

        The unique `(scope, key)` constraint decides between concurrent claimers; the winner's
        operation row and first execution attempt are written atomically.
        """
        row = _operation_values(intent, self._at)
        while True:
            claimed = await self.writer.claim(row)
            if claimed is not None:
                return claimed
            existing = await self.writer.fetch(intent.scope, intent.key)
            if existing is not None:
                return Claim(existing, created=False)
            # The row that won the conflict was deleted since (pruning, docs/operations.md):
            # the key is free again, so claim it anew.

    async def restart(self, current: OperationRecord, intent: Intent) -> OperationRecord | None:
        """Begin another execution of a `failed` or `outcome_unknown` operation (a continuation).

        Returns the new row, or None when another caller changed the operation first.
        """
        check_transition(current.status, Status.IN_FLIGHT)
        now = self._at()
        values = {
            "status": Status.IN_FLIGHT.value,
            "fingerprint": intent.fingerprint,
            "arguments": intent.arguments,
            "auth_hash": intent.auth_hash,
            "lease_owner": intent.owner,
            "lease_expires_at": self._at(intent.lease_seconds),
            "executions": current.executions + 1,
            "last_sent_at": now,
            "next_check_at": None,
            "checks": 0,
        }
        return await self.writer.change(Change(current, values, now))  # opens an execution

    async def finish(
        self, current: OperationRecord, owner: str, outcome: Outcome
    ) -> OperationRecord | None:
        """Record how the owner's execution ended; None if the owner was fenced off meanwhile.

        The attempt row keeps the owner's evidence either way: it is the owner's own record. A
        fenced-off execution that may have had an effect voids the absence its operation has
        been judged by since (`_void_absence`).
        """
        check_transition(current.status, outcome.status)
        now = self._at()
        values: dict[str, Any] = {
            "status": outcome.status.value,
            "lease_owner": None,
            "lease_expires_at": None,
            "result": outcome.result,
            "error": outcome.error,
            "last_code": outcome.code,
        }
        if outcome.status is Status.OUTCOME_UNKNOWN:
            values["next_check_at"] = now
        closes = ClosedExecution(owner, outcome.status.value, outcome.attempt_values, now)
        finished = await self.writer.change(Change(current, values, now, closes=closes))
        if finished is None and outcome.status in _MAY_HAVE_SENT:
            await self._void_absence(current)
        return finished

    async def _void_absence(self, current: OperationRecord) -> None:
        """An execution fenced off after it may have had an effect: its operation, if it has
        since been judged by absence (`failed`) or waits on it (`outcome_unknown`), is unknown
        again, its settle window starting now, so that no lookup made before this counts.

        The writer may have sent long after its fence closed (it stalled between its last check
        and its write), when a lookup had already found nothing: this late report is the only
        sign of it. An operation that is `in_flight` again (the next execution runs) or final
        is left alone.
        """
        check_transition(Status.FAILED, Status.OUTCOME_UNKNOWN)
        now = self._now_sql()
        statement = (
            update(operations)
            .where(
                operations.c.id == current.id,
                operations.c.status.in_([Status.FAILED.value, Status.OUTCOME_UNKNOWN.value]),
            )
            .values(error=None, **unknown_from(now, LATE_SEND))
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    async def renew_leases(self, leases: Mapping[int, str], seconds: float) -> set[int]:
        """Extend the `in_flight` leases `{operation id: owner}` by `seconds`, in one statement.

        Returns the ids whose owner still held the lease; an owner missing from it has lost its
        lease and can no longer record its outcome.
        """
        if not leases:
            return set()
        return await self.writer.renew(leases, self._at(seconds))


def _operation_values(intent: Intent, at: Callable[[float], Moment]) -> dict[str, Any]:
    """Every column of a new operation but its id, with times from `at(offset)`."""
    now = at(0.0)
    return {
        "scope": intent.scope,
        "key": intent.key,
        "tool": intent.tool,
        "fingerprint": intent.fingerprint,
        "status": Status.IN_FLIGHT.value,
        "version": 1,
        "lease_owner": intent.owner,
        "lease_expires_at": at(intent.lease_seconds),
        "executions": 1,
        "max_executions": intent.max_executions,
        "arguments": intent.arguments,
        "auth_hash": intent.auth_hash,
        "last_sent_at": now,
        "checks": 0,
        "created_at": now,
        "updated_at": now,
        "result": None,
        "error": None,
        "last_code": None,
        "next_check_at": None,
    }
