"""Operator resolution: a person settles what reconciliation could not, on the record.

A `needs_attention` operation is resolved this way, and so is an `outcome_unknown` one when the
operator brings evidence (a tool without a lookup would otherwise wait out its whole backoff
before escalating). `succeeded` stores the result the operator vouches for; `failed` is the
operator's proof of absence and follows the same rule as a lookup's conclusive NotFound (see
`after_absence`). Who, when, why and the evidence are kept as an `operator` attempt, written in
the same transaction as the change, and only if it took effect.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from writesafe.ledger import AttemptKind, Ledger, OperationRecord, Status, dumps_json
from writesafe.reconciler._absence import after_absence
from writesafe.reconciler._contract import CodeRegistry, SideEffects

Resolution = Literal["succeeded", "failed"]
RESOLVABLE = frozenset({Status.NEEDS_ATTENTION, Status.OUTCOME_UNKNOWN})
"""The states an operator may resolve; no writer holds a lease in either."""


class EvidenceRequired(ValueError):
    """An `outcome_unknown` operation is settled only on evidence of what the operator checked."""


class ResolutionRefused(Exception):
    """Only a `RESOLVABLE` operation can be resolved by an operator; `status` is its state."""

    def __init__(self, scope: str, key: str, status: Status | None) -> None:
        if status is None:
            message = f"no operation with key {key!r} in scope {scope!r}"
        else:
            message = (
                f"operation {key!r} in scope {scope!r} is {status.value}; only needs_attention "
                "and outcome_unknown operations are resolved by an operator"
            )
        super().__init__(message)
        self.scope = scope
        self.key = key
        self.status = status


class OperationNotFound(ResolutionRefused):
    """No operation exists under that scope and key."""

    def __init__(self, scope: str, key: str) -> None:
        super().__init__(scope, key, None)


async def resolve_operation(
    ledger: Ledger,
    codes: CodeRegistry,
    *,
    scope: str,
    key: str,
    outcome: Resolution,
    encode: Callable[[str, Any], str],
    result: Any,
    reason: str,
    actor: str,
    evidence: Mapping[str, Any] | None,
) -> OperationRecord:
    """Resolve an operation an operator may settle; `encode(tool, result)` stores a succeeded
    result (and refuses one that does not fit the tool)."""
    operation = await ledger.get(scope, key)
    if operation is None:
        raise OperationNotFound(scope, key)
    if operation.status not in RESOLVABLE:
        raise ResolutionRefused(scope, key, operation.status)
    if operation.status is Status.OUTCOME_UNKNOWN and not evidence:
        raise EvidenceRequired(
            "an outcome_unknown operation is settled only with evidence of what you checked "
            'downstream (e.g. {"order": "ord-77", "checked_by": "support ticket T-12"})'
        )
    record = {
        "previous_status": operation.status.value,
        "last_code": operation.last_code,
        "checks": operation.checks,
        "operator_evidence": dict(evidence or {}),
    }
    audit: dict[str, Any] = {"outcome": outcome, "actor": actor, "reason": reason}
    if outcome == "succeeded":
        row = await ledger.settle(
            operation,
            AttemptKind.OPERATOR,
            {**audit, "evidence": dumps_json(record)},
            status=Status.SUCCEEDED,
            record_if_lost=False,
            result=encode(operation.tool, result),
            next_check_at=None,
        )
    else:
        absent = after_absence(operation, codes).envelope
        envelope = codes.envelope(
            absent.code,
            f"resolved as failed by {actor}: {reason}",
            side_effects=SideEffects.NONE,
            cause=absent.cause,
        )
        row = await ledger.settle(
            operation,
            AttemptKind.OPERATOR,
            {**audit, "evidence": dumps_json(record), "code": envelope.code},
            status=Status.FAILED,
            record_if_lost=False,
            error=dumps_json(envelope.to_json_dict()),
            last_code=envelope.code,
            next_check_at=None,
        )
    if row is None:  # resolved by someone else between our read and our write
        latest = await ledger.get(scope, key)
        raise ResolutionRefused(scope, key, latest.status if latest else None)
    return row
