"""The inline replay gate: a call that finds its key's outcome unknown asks the lookup first.

Found → the operation succeeds with the found result and the caller gets it; nothing executes.
Proven absent → this caller executes again, within the key's budget (or the key fails when the
budget is spent or the last failure was unclassified). Anything else → OUTCOME_UNKNOWN with a
retry_after. A tool without a lookup never replays an unknown outcome.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from writesafe.idempotency._errors import WriteSafeError
from writesafe.idempotency._replays import decoded
from writesafe.idempotency._spec import GuardedCall
from writesafe.ledger import AttemptKind, Intent, Ledger, OperationRecord, Status, dumps_json
from writesafe.reconciler import Code, CodeRegistry, Unsettled
from writesafe.reconciler._admission import stored_envelope
from writesafe.reconciler._check import run_lookup
from writesafe.reconciler._decisions import Established, ProvenAbsent, judge_lookup
from writesafe.reconciler._escalation import caller_envelope
from writesafe.reconciler._views import operation_info

ACTOR = "caller"
_ASK_AGAIN_MS = 1_000


@dataclass(frozen=True, slots=True)
class Reconciled:
    """The lookup found the effect: return `value`, decoded as a replay would be."""

    value: Any
    operation: OperationRecord


@dataclass(frozen=True, slots=True)
class Resumed:
    """The effect proved absent: execute under this restarted operation (the caller's lease,
    written by a statement sent at `leased_at` on the monotonic clock)."""

    operation: OperationRecord
    leased_at: float


async def replay_gate(
    ledger: Ledger,
    codes: CodeRegistry,
    call: GuardedCall,
    operation: OperationRecord,
    intent: Intent,
) -> Reconciled | Resumed | None:
    """Decide a call on an `outcome_unknown` or `needs_attention` operation with the same payload.

    None: the operation changed while we looked; read it again. Raises `WriteSafeError` when the
    call ends here without a result.
    """
    if operation.status is Status.NEEDS_ATTENTION:
        raise _handoff(codes, operation)
    spec = call.tool.lookup_spec(codes)
    if spec.lookup is None:
        stored = stored_envelope(operation, codes)  # the answer the operation ended with
        if stored is not None:
            raise WriteSafeError(stored.with_operation(operation_info(operation)))
        raise _unknown(
            codes,
            operation,
            Unsettled.NO_LOOKUP,
            f"{call.tool.name} has no lookup, so the key never runs again by itself",
        )
    started_at = await ledger.now()  # the ledger's clock judges the settle window
    check = await run_lookup(spec, operation, await ledger.attempts(operation.id), started_at)
    audit = check.attempt(ACTOR, intent.owner)
    verdict = judge_lookup(check, operation, codes)
    if isinstance(verdict, Established):
        found = await ledger.settle(
            operation,
            AttemptKind.LOOKUP,
            audit,
            status=Status.SUCCEEDED,
            result=verdict.result,
            next_check_at=None,
        )
        if found is None:
            return None
        return Reconciled(decoded(call, verdict.result, operation_info(found), codes), found)
    if isinstance(verdict, ProvenAbsent):
        absence = verdict.absence
        if absence.continues:
            await ledger.record_absence(operation, **audit)
            leased_at = time.monotonic()
            restarted = await ledger.restart(operation, intent)
            return None if restarted is None else Resumed(restarted, leased_at)
        failed = await ledger.settle(
            operation,
            AttemptKind.LOOKUP,
            audit,
            status=Status.FAILED,
            error=dumps_json(absence.envelope.to_json_dict()),
            last_code=absence.envelope.code,
            next_check_at=None,
        )
        if failed is None:
            return None
        raise WriteSafeError(absence.envelope.with_operation(operation_info(failed)))
    if verdict.escalate:
        escalated = await ledger.settle(
            operation,
            AttemptKind.LOOKUP,
            audit,
            status=Status.NEEDS_ATTENTION,
            next_check_at=None,
        )
        if escalated is None:
            return None
        raise _handoff(codes, escalated)
    await ledger.record_attempt(operation.id, AttemptKind.LOOKUP, **audit)
    reason = check.evidence.get("reason", "the lookup could not tell")
    retry_after_ms = check.retry_after_ms(started_at, _ASK_AGAIN_MS)
    why = Unsettled.SETTLING if verdict.settling else Unsettled.LOOKUP_UNKNOWN
    raise _unknown(
        codes, operation, why, f"the lookup could not confirm it: {reason}", retry_after_ms
    )


def _handoff(codes: CodeRegistry, operation: OperationRecord) -> WriteSafeError:
    """The escalated operation's answer: a handoff, as every rendering shows it."""
    stored = stored_envelope(operation, codes)
    envelope = caller_envelope(operation.status, stored, operation_info(operation), codes)
    assert envelope is not None, "an escalated operation always has a caller envelope"
    return WriteSafeError(envelope)


def _unknown(
    codes: CodeRegistry,
    operation: OperationRecord,
    cause: Unsettled,
    why: str,
    retry_after_ms: int | None = None,
) -> WriteSafeError:
    return WriteSafeError(
        codes.envelope(
            Code.OUTCOME_UNKNOWN,
            f"an earlier execution may have been applied and is not run again: {why}",
            retry_after_ms=retry_after_ms,
            cause=cause,
            operation=operation_info(operation),
        )
    )
