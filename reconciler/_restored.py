"""What a first execution does while the ledger is restored: the lookup first, or a refusal.

A restored ledger has forgotten what ran after its restore point, so a key it does not know may
have run. Until the restore closes, such a key is asked about before it runs: found → it
succeeded (nothing runs), conclusively absent → it runs, otherwise nothing runs and the answer
says why. Pure decisions and the envelopes they end with; the guard carries them out.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from writesafe.ledger import Restored
from writesafe.reconciler._causes import LEDGER_RESTORED
from writesafe.reconciler._check import Check, LookupOutcome
from writesafe.reconciler._contract import Code, CodeRegistry, ErrorEnvelope, OperationInfo


class FirstRun(StrEnum):
    """What a call does with the operation it has just created."""

    EXECUTE = "execute"  # not restored, or the lookup proved the effect absent: run the write
    LOOK_UP = "look_up"  # restored: ask the tool's lookup before anything runs
    REFUSE = "refuse"  # restored and the tool has no lookup: an operator decides
    SETTLE = "settle"  # the lookup found the effect: record it succeeded, run nothing
    HOLD = "hold"  # the lookup could not tell: the outcome is unknown, nothing runs


def decide_first_run(restored: Restored | None, *, has_lookup: bool) -> FirstRun:
    """The guard's table for a key the ledger did not know: run it, unless a restore is open."""
    if restored is None:
        return FirstRun.EXECUTE
    return FirstRun.LOOK_UP if has_lookup else FirstRun.REFUSE


def after_first_lookup(check: Check) -> FirstRun:
    """What the lookup made before a first execution established (its `NotFound` counts only
    once the settle window after the restore was recorded has closed: see `sent_by`)."""
    if check.outcome is LookupOutcome.FOUND:
        return FirstRun.SETTLE
    if check.outcome is LookupOutcome.NOT_FOUND:
        return FirstRun.EXECUTE
    return FirstRun.HOLD


def sent_by(restored: Restored) -> datetime:
    """The latest a forgotten execution can have been sent: before the restore was recorded.
    The lookup's settle window is judged from here, not from this call's claim."""
    return restored.recorded_at


def restored_refusal(
    codes: CodeRegistry, tool: str, restored: Restored, info: OperationInfo
) -> ErrorEnvelope:
    """UNKNOWN_ERROR (handoff) for a tool without a lookup: waiting changes nothing, a person
    decides whether the key ran (`writesafe resolve`)."""
    return codes.envelope(
        Code.UNKNOWN_ERROR,
        f"the ledger was restored to {restored.since.isoformat()} and does not know this key; "
        f"{tool} has no lookup to ask whether it ran, so it is not run",
        cause=LEDGER_RESTORED,
        operation=info,
    )


def restored_unknown(
    codes: CodeRegistry, reason: str, info: OperationInfo, retry_after_ms: int
) -> ErrorEnvelope:
    """OUTCOME_UNKNOWN for a key the lookup could not clear: it may have run before the restore;
    nothing ran now, and reconciliation (or the next call) asks again."""
    return codes.envelope(
        Code.OUTCOME_UNKNOWN,
        "the ledger was restored and does not know this key, which may have run before; "
        f"it is not run: the lookup could not confirm it: {reason}",
        retry_after_ms=retry_after_ms,
        cause=LEDGER_RESTORED,
        operation=info,
    )
