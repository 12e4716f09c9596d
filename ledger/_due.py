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


When = ColumnElement[datetime] | datetime
"""A time in a statement: SQL `now()` (plus an offset) on the store's clock, else a value."""


@dataclass(frozen=True, slots=True)
class Narrowing:
    """The operations a pass may look at: of `tools`, last sent by `sent_before` and of `scope`
    (None: any)."""

    tools: Sequence[str]
    sent_before: When | None = None
    scope: str | None = None

    def of(self, query: Select[Any]) -> Select[Any]:
        """`query` kept to these operations."""
        query = query.where(operations.c.tool.in_(self.tools))
        if self.sent_before is not None:
            query = query.where(operations.c.last_sent_at <= self.sent_before)
        if self.scope is not None:
            query = query.where(operations.c.scope == self.scope)
        return query


def in_flight(narrowing: Narrowing) -> Select[Any]:
    """The `in_flight` operations a pass could take over (SQLite's candidates)."""
    return narrowing.of(select(operations).where(operations.c.status == Status.IN_FLIGHT.value))


def due_query(due: Due, now: When, narrowing: Narrowing) -> Select[Any]:
    return narrowing.of(select(operations.c.id).where(status_in([due.status]), due.column <= now))


def claimable(due: Due, now: When, limit: int, narrowing: Narrowing) -> Select[Any]:
    # The longest-due rows nobody else holds; locked until the claim commits. The order is the
    # index's own, so the scan stops after `limit` rows however many are due (any tiebreaker
    # column would make PostgreSQL sort the whole due set on every claim).
    return (
        due_query(due, now, narrowing)
        .order_by(due.column)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
