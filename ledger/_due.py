"""Which operations a reconciliation pass may take: the queries, served by the status indexes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, select

from writesafe.ledger._models import status_in
from writesafe.ledger._states import Status
from writesafe.ledger._writer import operations


@dataclass(frozen=True, slots=True)
class Due:
    """A state in which an operation becomes due, and the column that says when."""

    status: Status
    column: ColumnElement[Any]  # when the row becomes due; the (status, column) index serves it


CRASHED = Due(Status.IN_FLIGHT, operations.c.lease_expires_at)
UNKNOWN = Due(Status.OUTCOME_UNKNOWN, operations.c.next_check_at)


def in_flight(
    tools: Sequence[str],
    sent_before: ColumnElement[datetime] | datetime | None,
    scope: str | None,
) -> Select[Any]:
    """The `in_flight` operations of `tools` a pass could take over (SQLite's candidates)."""
    query = select(operations).where(
        operations.c.status == Status.IN_FLIGHT.value, operations.c.tool.in_(tools)
    )
    return narrowed(query, sent_before, scope)


def due_query(
    due: Due,
    now: ColumnElement[datetime] | datetime,
    tools: Sequence[str],
    sent_before: ColumnElement[datetime] | datetime | None,
    scope: str | None,
) -> Select[Any]:
    query = select(operations.c.id).where(
        status_in([due.status]), due.column <= now, operations.c.tool.in_(tools)
    )
    return narrowed(query, sent_before, scope)


def narrowed(
    query: Select[Any], sent_before: ColumnElement[datetime] | datetime | None, scope: str | None
) -> Select[Any]:
    """`query` kept to the operations last sent by `sent_before` and of `scope` (None: any)."""
    if sent_before is not None:
        query = query.where(operations.c.last_sent_at <= sent_before)
    if scope is not None:
        query = query.where(operations.c.scope == scope)
    return query


def claimable(
    due: Due,
    now: ColumnElement[datetime] | datetime,
    limit: int,
    tools: Sequence[str],
    sent_before: ColumnElement[datetime] | datetime | None,
    scope: str | None,
) -> Select[Any]:
    # The longest-due rows nobody else holds; locked until the claim commits. The order is the
    # index's own, so the scan stops after `limit` rows however many are due (any tiebreaker
    # column would make PostgreSQL sort the whole due set on every claim).
    return (
        due_query(due, now, tools, sent_before, scope)
        .order_by(due.column)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
