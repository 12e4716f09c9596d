"""The operation state machine: the five states and the only transitions allowed between them.

Every status change in the ledger goes through `check_transition`, so an illegal move is a bug
caught in one place rather than a row quietly left in a state nothing can leave.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """Where an operation stands."""

    IN_FLIGHT = "in_flight"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    OUTCOME_UNKNOWN = "outcome_unknown"
    NEEDS_ATTENTION = "needs_attention"


TRANSITIONS: dict[Status, frozenset[Status]] = {
    # An attempt ends in a known success, a proven no-effect failure, or an unknown outcome;
    # in_flight -> in_flight is the next execution of an automatic retry, under the same lease.
    # A write that returned a result its tool does not declare goes to a person at once: it ran,
    # so it may have had an effect, and nobody can be given its result.
    Status.IN_FLIGHT: frozenset(
        {
            Status.IN_FLIGHT,
            Status.SUCCEEDED,
            Status.FAILED,
            Status.OUTCOME_UNKNOWN,
            Status.NEEDS_ATTENTION,
        }
    ),
    # Terminal: duplicates replay the stored result.
    Status.SUCCEEDED: frozenset(),
    # A continuation (new attempt) is allowed only by the continuation policy. An earlier
    # execution, fenced off, that reports it may have sent after all voids the proof of no
    # effect: the operation is unknown again (`Ledger.finish`).
    Status.FAILED: frozenset({Status.IN_FLIGHT, Status.OUTCOME_UNKNOWN}),
    # Reconciliation decides; proven absence lets the key continue with a new attempt.
    Status.OUTCOME_UNKNOWN: frozenset(
        {Status.SUCCEEDED, Status.FAILED, Status.NEEDS_ATTENTION, Status.IN_FLIGHT}
    ),
    # Only an operator, with evidence, resolves an escalated operation.
    Status.NEEDS_ATTENTION: frozenset({Status.SUCCEEDED, Status.FAILED}),
}


class IllegalTransition(Exception):
    """A status change the state machine does not allow was requested."""

    def __init__(self, source: Status, target: Status) -> None:
        super().__init__(f"illegal transition {source.value} -> {target.value}")
        self.source = source
        self.target = target


def check_transition(source: Status, target: Status) -> None:
    """Raise `IllegalTransition` unless `source -> target` is allowed."""
    if target not in TRANSITIONS[source]:
        raise IllegalTransition(source, target)
