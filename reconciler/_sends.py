"""What the ledger knows about whether any execution of an operation sent its write.

A lookup's `Found` is believed only where the effect could exist. An execution that ended with a
proof of no effect (its fence refused the send before anything went out, or an adapter proved the
request never reached the downstream) sent nothing; one still open, or one that ended any other
way, may have. When every execution of an operation sent nothing, the ledger knows better than a
`Found`: it goes to a person with both stories as evidence.
"""

from __future__ import annotations

from collections.abc import Sequence

from writesafe.ledger import AttemptKind
from writesafe.reconciler._contract import SideEffects
from writesafe.reconciler._views import AttemptView


def sent_nothing(attempts: Sequence[AttemptView]) -> bool:
    """True when the operation had executions and each one ended proving it sent nothing."""
    executions = [a for a in attempts if a.kind is AttemptKind.EXECUTION]
    return bool(executions) and all(_proved_no_send(a) for a in executions)


def _proved_no_send(execution: AttemptView) -> bool:
    return (
        execution.finished_at is not None
        and execution.error is not None
        and execution.error.side_effects is SideEffects.NONE
    )
