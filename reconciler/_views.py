"""Read models of the ledger for callers, the CLI and the HTTP service."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, ConfigDict

from writesafe.ledger import AttemptKind, AttemptRecord, OperationRecord, Status, loads_json
from writesafe.reconciler._admission import admit_stored
from writesafe.reconciler._contract import CODES, CodeRegistry, ErrorEnvelope, OperationInfo
from writesafe.reconciler._escalation import caller_envelope


class AttemptView(BaseModel):
    """One audited attempt: an execution, a lookup or an operator resolution."""

    model_config = ConfigDict(frozen=True)

    kind: AttemptKind
    execution: int | None
    outcome: str | None
    code: str | None
    error: ErrorEnvelope | None
    evidence: dict[str, Any] | None
    actor: str | None
    reason: str | None
    started_at: datetime
    finished_at: datetime | None

    @classmethod
    def from_record(cls, record: AttemptRecord, codes: CodeRegistry = CODES) -> AttemptView:
        return cls(
            kind=record.kind,
            execution=record.execution,
            outcome=record.outcome,
            code=record.code,
            error=_envelope(record.envelope, codes, f"attempt {record.id}"),
            evidence=None if record.evidence is None else loads_json(record.evidence),
            actor=record.actor,
            reason=record.reason,
            started_at=record.started_at,
            finished_at=record.finished_at,
        )


class OperationSummary(BaseModel):
    """What happened to an operation, without its attempts (the rows of a listing).

    `result` is meaningful when `status` is succeeded.
    """

    model_config = ConfigDict(frozen=True)

    key: str
    scope: str
    tool: str
    status: Status
    executions: int
    max_executions: int
    attempts_left: int
    result: Any = None
    error: ErrorEnvelope | None = None
    lease_expires_at: datetime | None = None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_record(
        cls, operation: OperationRecord, codes: CodeRegistry = CODES, *, with_result: bool = True
    ) -> Self:
        """`codes` judges the stored envelope (the application's registry, where it has one);
        `with_result` False leaves `result` None, for a caller that sends the stored JSON text
        as it is (the service's listing: parsing it was most of a large page's cost)."""
        return cls(
            key=operation.key,
            scope=operation.scope,
            tool=operation.tool,
            status=operation.status,
            executions=operation.executions,
            max_executions=operation.max_executions,
            attempts_left=attempts_left(operation),
            result=(
                loads_json(operation.result)
                if with_result and operation.result is not None
                else None
            ),
            error=_envelope(operation.error, codes, f"{operation.scope}/{operation.key}"),
            lease_expires_at=operation.lease_expires_at,
            created_at=operation.created_at,
            updated_at=operation.updated_at,
        )

    def caller_envelope(self, codes: CodeRegistry = CODES) -> ErrorEnvelope | None:
        """The envelope a caller of this key gets now, as the guard answers it (a handoff for an
        escalated operation): what the console shows, computed where the guard computes it."""
        info = OperationInfo(
            key=self.key,
            status=self.status.value,
            attempt=self.executions,
            attempts_left=self.attempts_left,
        )
        return caller_envelope(self.status, self.error, info, codes)


class OperationStatus(OperationSummary):
    """What happened to an operation, by key, with every audited attempt."""

    attempts: list[AttemptView] = []

    @classmethod
    def from_records(
        cls,
        operation: OperationRecord,
        attempts: list[AttemptRecord],
        codes: CodeRegistry = CODES,
    ) -> OperationStatus:
        return cls.from_record(operation, codes).model_copy(
            update={"attempts": [AttemptView.from_record(a, codes) for a in attempts]}
        )


def attempts_left(operation: OperationRecord) -> int:
    return max(operation.max_executions - operation.executions, 0)


def operation_info(operation: OperationRecord) -> OperationInfo:
    """The envelope's `operation` block for a ledger row."""
    return OperationInfo(
        key=operation.key,
        status=operation.status.value,
        attempt=operation.executions,
        attempts_left=attempts_left(operation),
    )


def _envelope(text: str | None, codes: CodeRegistry, source: str) -> ErrorEnvelope | None:
    return None if text is None else admit_stored(text, codes, source=source)
