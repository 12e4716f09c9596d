"""The first-run gate: while the ledger is restored, a key it did not know is looked up first.

The call has claimed the key (the row is `in_flight` under its lease, nothing sent). Found →
the operation succeeds with the found result, nothing runs; proven absent → the call runs it;
otherwise the operation is left `outcome_unknown` (code `LEDGER_RESTORED`), so that the
reconciler and later calls go on asking, and nothing runs. A tool without a lookup is refused
the same way, and reconciliation hands the key to an operator.
"""

from __future__ import annotations

from dataclasses import replace

from writesafe.idempotency._errors import WriteSafeError
from writesafe.idempotency._gate import ACTOR, Reconciled, Resumed
from writesafe.idempotency._spec import GuardedCall
from writesafe.ledger import (
    RESTORED_KEY,
    AttemptKind,
    Ledger,
    OperationRecord,
    Outcome,
    Restored,
    Status,
    dumps_json,
)
from writesafe.reconciler import CodeRegistry, ErrorEnvelope
from writesafe.reconciler._check import run_lookup
from writesafe.reconciler._restored import (
    FirstRun,
    after_first_lookup,
    restored_refusal,
    restored_unknown,
    sent_by,
)
from writesafe.reconciler._views import operation_info

_ASK_AGAIN_MS = 1_000


async def first_run_gate(
    ledger: Ledger,
    codes: CodeRegistry,
    call: GuardedCall,
    operation: OperationRecord,
    owner: str,
    restored: Restored,
    leased_at: float,
) -> Reconciled | Resumed | None:
    """Decide the first execution of `operation` (created by this call's claim as `owner`,
    at `leased_at`) while `restored` is open. None: the row was taken over meanwhile; read it
    again. Raises `WriteSafeError` when nothing runs and nothing was found."""
    spec = call.tool.lookup_spec(codes)
    info = operation_info(operation)
    if spec.lookup is None:
        refusal = restored_refusal(codes, call.tool.name, restored, info)
        raise await _held(ledger, operation, owner, restored, refusal)
    # A forgotten execution was sent before the restore was recorded: absence is conclusive
    # only once the settle window from then has closed.
    forgotten = replace(operation, last_sent_at=sent_by(restored))
    check = await run_lookup(spec, forgotten, [], await ledger.now())
    await ledger.record_attempt(operation.id, AttemptKind.LOOKUP, **check.attempt(ACTOR, owner))
    decision = after_first_lookup(check)
    if decision is FirstRun.EXECUTE:
        return Resumed(operation, leased_at)
    if decision is FirstRun.SETTLE:
        assert check.result is not None, "a found check carries its encoded result"
        found = Outcome(Status.SUCCEEDED, result=check.result, evidence=_evidence(restored))
        finished = await ledger.finish(operation, owner, found)
        if finished is None:
            return None
        return Reconciled(call.tool.codec.decode(check.result), finished)
    reason = check.evidence.get("reason", "the lookup could not tell")
    now = await ledger.now()
    unknown = restored_unknown(codes, reason, info, check.retry_after_ms(now, _ASK_AGAIN_MS))
    raise await _held(ledger, operation, owner, restored, unknown)


async def _held(
    ledger: Ledger,
    operation: OperationRecord,
    owner: str,
    restored: Restored,
    envelope: ErrorEnvelope,
) -> WriteSafeError:
    """Leave the operation `outcome_unknown` as a forgotten execution may have left it, with
    the answer every later call gets until it is settled; nothing was sent."""
    outcome = Outcome(
        Status.OUTCOME_UNKNOWN,
        error=dumps_json(envelope.to_json_dict()),
        code=RESTORED_KEY,
        evidence=_evidence(restored),
    )
    held = await ledger.finish(operation, owner, outcome)
    return WriteSafeError(envelope.with_operation(operation_info(held or operation)))


def _evidence(restored: Restored) -> str:
    return dumps_json(
        {
            "reason": "the ledger was restored: this execution was not sent, an earlier one "
            "may have been",
            "restored_since": restored.since.isoformat(),
            "detected_by": restored.detected_by.value,
        }
    )
