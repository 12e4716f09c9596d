"""What proven absence of the effect means for an operation whose outcome was unknown.

Absence proves the last execution had no effect; whether the key may run again still follows the
continuation policy: only a "sent, then lost" outcome continues, and only while budget remains.
An UNKNOWN_ERROR (an unclassified failure) stays terminal for the key, as DESIGN.md says.
"""

from __future__ import annotations

from dataclasses import dataclass

from writesafe.ledger import LATE_SEND, LEASE_EXPIRED, RESTORED_KEY, OperationRecord
from writesafe.reconciler._causes import Untrusted
from writesafe.reconciler._contract import (
    Code,
    CodeRegistry,
    ErrorEnvelope,
    NextAction,
    SideEffects,
)


@dataclass(frozen=True, slots=True)
class Absence:
    """`continues`: the key may execute again. `envelope` is the `failed` record otherwise, and
    what a reconciler stores when it proves absence with nobody waiting (a retryable no-effect
    code, so the caller's next call continues under the continuation policy)."""

    continues: bool
    envelope: ErrorEnvelope


def after_absence(operation: OperationRecord, codes: CodeRegistry) -> Absence:
    if not _lost_in_transit(operation.last_code, codes):
        return Absence(
            False,
            codes.envelope(
                Code.UNKNOWN_ERROR,
                "the last execution ended in an unclassified failure; the effect proved absent, "
                "but the key is not run again",
                side_effects=SideEffects.NONE,
                cause=Untrusted.ABSENT_AFTER_UNCLASSIFIED,
            ),
        )
    if operation.executions >= operation.max_executions:
        # The code whose executions spent the budget: OUTCOME_UNKNOWN for a lost lease too.
        spent_by = operation.last_code
        if spent_by is None or spent_by not in codes:
            spent_by = Code.OUTCOME_UNKNOWN
        return Absence(
            False,
            codes.envelope(
                Code.RETRY_EXHAUSTED,
                f"the effect proved absent and all {operation.max_executions} executions of this "
                "key are used",
                cause=spent_by,
            ),
        )
    return Absence(
        True,
        codes.envelope(
            Code.TEMP_UNAVAILABLE,
            "the effect of the last execution proved absent; a call with the same key runs it "
            "again",
            retry_after_ms=0,  # at once: nothing is left to wait for
        ),
    )


def _lost_in_transit(code: str | None, codes: CodeRegistry) -> bool:
    # The outcome was unknown because the request was sent and its answer lost (or its worker
    # died), not because something failed in a way nobody classified.
    if code is None or code in (Code.OUTCOME_UNKNOWN, LEASE_EXPIRED, LATE_SEND, RESTORED_KEY):
        return True
    return code in codes and codes.verdict(code).next_action is NextAction.RECONCILE
