"""The record of an execution another actor decided: closed when its lease is taken over, and
ended as its operation is when a lookup or an operator settles it.

An execution attempt is its owner's record, closed when the owner reports. An owner that crashed
never reports, so without this its attempt would say `in_flight` forever beside an operation
that has long been taken over or settled. Only an operation's current execution is touched: an
earlier one's record was settled when the next execution began.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, and_, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from writesafe.ledger._json import dumps_json
from writesafe.ledger._records import AttemptKind
from writesafe.ledger._states import Status
from writesafe.ledger._writer import UNSETTLED_EXECUTION, attempts, operations

TAKEN_OVER = dumps_json(
    {"closed_by": "takeover", "reason": "the lease ran out before the execution reported"}
)
"""Evidence of an execution attempt closed because its lease was taken over."""

_SETTLES_EXECUTION = (Status.SUCCEEDED, Status.FAILED)
"""Statuses whose settlement also ends the execution it establishes the truth of."""


def _current_executions(ids: Sequence[int], outcomes: Sequence[str]) -> ColumnElement[bool]:
    """The current execution attempt of each operation in `ids`, while its outcome is one of
    `outcomes`."""
    current = (
        select(operations.c.executions)
        .where(operations.c.id == attempts.c.operation_id)
        .scalar_subquery()
    )
    return and_(
        attempts.c.operation_id.in_(ids),
        attempts.c.kind == AttemptKind.EXECUTION.value,
        attempts.c.execution == current,
        attempts.c.outcome.in_(outcomes),
    )


async def close_taken_over(
    conn: AsyncConnection,
    ids: Sequence[int],
    now: ColumnElement[datetime] | datetime,
    code: str,
) -> None:
    """Close the execution attempts whose leases were just taken over (`code`): their outcome is
    unknown, and the takeover is the evidence. An owner that reports after all is fenced off
    and records `fenced` with its own evidence."""
    if ids:
        await conn.execute(
            update(attempts)
            .where(_current_executions(ids, [Status.IN_FLIGHT.value]))
            .values(
                outcome=Status.OUTCOME_UNKNOWN.value,
                code=code,
                evidence=TAKEN_OVER,
                finished_at=now,
            )
        )


async def close_settled(
    conn: AsyncConnection, landed: Sequence[tuple[int, Status | None]], now: datetime
) -> None:
    """Settlements that landed, as `(operation id, status)`: an execution still unsettled when
    a lookup or an operator settles its operation ends as the operation does, `succeeded`
    (the effect was found) or `failed` (no effect)."""
    for status in _SETTLES_EXECUTION:
        await close_executions(conn, [id_ for id_, to in landed if to is status], status, now)


async def close_executions(
    conn: AsyncConnection, ids: Sequence[int], status: Status, now: datetime
) -> None:
    """End the unsettled current execution of each operation in `ids` as `status`."""
    if ids:
        await conn.execute(
            update(attempts)
            .where(_current_executions(ids, UNSETTLED_EXECUTION))
            .values(outcome=status.value, finished_at=func.coalesce(attempts.c.finished_at, now))
        )
