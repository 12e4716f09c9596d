"""What a guarded call does with the row it found, and what a lookup's answer establishes.

Pure decisions, no I/O: the guard, the replay gate and the reconciler read the stores, ask these
functions, and carry out the value they return (tenacity's `iter()` decides, its caller sleeps).
One function per question, so that the guard and the reconciler cannot read the same facts two
ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from writesafe.ledger import OperationRecord, Outcome, Status
from writesafe.reconciler._absence import Absence, after_absence
from writesafe.reconciler._check import Check, LookupOutcome
from writesafe.reconciler._contract import CodeRegistry


class RowAction(StrEnum):
    """What a call does with the operation row its claim found."""

    EXECUTE = "execute"  # the row is this call's own: run the write
    REPLAY = "replay"  # succeeded with the same payload: answer its result
    KEY_REUSED = "key_reused"  # the key holds a different payload: refuse
    CONTINUE = "continue"  # failed: the continuation policy decides (`decide_continuation`)
    JUDGE_LEASE = "judge_lease"  # another caller's write is in flight: has its lease run out?
    ASK_LOOKUP = "ask_lookup"  # the outcome is unknown: the lookup, before anything else


def decide_row(
    operation: OperationRecord, *, created: bool, owner: str, fingerprint: str
) -> RowAction:
    """The guard's table for a found row: its status, whose it is, and whether the payload
    matches. A failed row judges a different payload itself (a corrected input continues)."""
    if created or operation.lease_owner == owner:
        return RowAction.EXECUTE
    same_payload = operation.fingerprint == fingerprint
    if operation.status is Status.FAILED:
        return RowAction.CONTINUE
    if not same_payload:
        return RowAction.KEY_REUSED
    if operation.status is Status.SUCCEEDED:
        return RowAction.REPLAY
    if operation.status is Status.IN_FLIGHT:
        return RowAction.JUDGE_LEASE
    return RowAction.ASK_LOOKUP  # outcome_unknown, needs_attention


MIN_POLL_MS = 50
MAX_POLL_MS = 5_000


def held_for_ms(seconds_left: float) -> int:
    """How long a call waits before looking again at a lease the ledger says is held for
    `seconds_left` more: no sooner than a poll is worth, no later than a renewal may free it."""
    return int(min(max(seconds_left * 1000, MIN_POLL_MS), MAX_POLL_MS))


FIRST_POLL_SECONDS = 0.002
MAX_POLL_SECONDS = 0.05


@dataclass(frozen=True, slots=True)
class Poll:
    """Look again at a busy key after `sleep` seconds (0: at once); `pause` is the next one."""

    sleep: float
    pause: float


def next_poll(busy_ms: int, pause: float, remaining: float) -> Poll | None:
    """How a call waits on a key that is busy for `busy_ms` (0: the row changed under it), with
    `remaining` seconds of its wait left; None when the wait is over (IN_PROGRESS). Polls back
    off exponentially from `FIRST_POLL_SECONDS`: a duplicate of a fast write sees it soon."""
    if remaining <= 0:
        return None
    if not busy_ms:
        return Poll(0.0, pause)
    return Poll(min(pause, remaining), min(pause * 2, MAX_POLL_SECONDS))


def committed_earlier(
    found: OperationRecord | None, sent: OperationRecord, outcome: Outcome
) -> bool:
    """Whether `found` is `sent` finished with `outcome`: a retried finish whose first try
    committed before its connection broke finds it so (and must not record it twice)."""
    return (
        found is not None
        and found.version == sent.version + 1
        and found.status is outcome.status
        and found.result == outcome.result
        and found.error == outcome.error
    )


@dataclass(frozen=True, slots=True)
class Established:
    """The effect exists: the operation succeeds with `result` (the encoded found result)."""

    result: str


@dataclass(frozen=True, slots=True)
class ProvenAbsent:
    """The last execution had no effect; `absence` says whether the key may run again."""

    absence: Absence


@dataclass(frozen=True, slots=True)
class StillUnknown:
    """Nothing was established. `settling`: the answer was a premature not-found, which becomes
    conclusive once the settle window closes (asking before then spends no check budget).
    `escalate`: the answer was one the guard cannot believe (a `Found` the ledger disproves, or
    one whose result does not fit the tool): a person decides now, without asking again."""

    settling: bool
    escalate: bool = False


LookupVerdict = Established | ProvenAbsent | StillUnknown


def judge_lookup(check: Check, operation: OperationRecord, codes: CodeRegistry) -> LookupVerdict:
    """What one lookup established about `operation`, for the replay gate and the reconciler."""
    if check.outcome is LookupOutcome.FOUND:
        assert check.result is not None, "a found check carries its encoded result"
        return Established(check.result)
    if check.outcome is LookupOutcome.NOT_FOUND:
        return ProvenAbsent(after_absence(operation, codes))
    return StillUnknown(settling=check.settles_at is not None, escalate=check.escalate)
