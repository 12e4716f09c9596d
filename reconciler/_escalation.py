"""What a caller of an escalated operation gets: a handoff, whoever asks and however it is shown.

An operation in `needs_attention` waits for a person. Software that branches on `next_action`
must stop there, not poll: so the answer is UNKNOWN_ERROR (side effects unknown, `handoff`) with
cause `needs_attention`, never OUTCOME_UNKNOWN's `reconcile`. The guard, the HTTP renderings, MCP
and the console all take it from `caller_envelope`, so they cannot disagree.
"""

from __future__ import annotations

from writesafe.ledger import Status
from writesafe.reconciler._causes import Unsettled
from writesafe.reconciler._contract import (
    Code,
    CodeRegistry,
    ErrorEnvelope,
    NextAction,
    OperationInfo,
)

ESCALATED = (
    "an earlier execution may have been applied and is not run again; an operator must resolve it"
)


def escalated(
    info: OperationInfo | None, codes: CodeRegistry, why: str | None = None
) -> ErrorEnvelope:
    """The handoff envelope of an operation escalated to a person; `why`: what escalated it."""
    message = ESCALATED if why is None else f"{ESCALATED}: {why}"
    return codes.envelope(
        Code.UNKNOWN_ERROR, message, cause=Unsettled.NEEDS_ATTENTION, operation=info
    )


def caller_envelope(
    status: Status, stored: ErrorEnvelope | None, info: OperationInfo, codes: CodeRegistry
) -> ErrorEnvelope | None:
    """The envelope a caller of this operation's key gets now without a lookup running: for an
    escalated operation its handoff (the one stored when it was escalated as such, else the
    generic one), otherwise the envelope it ended with, if any."""
    if status is Status.NEEDS_ATTENTION:
        if stored is not None and stored.next_action is NextAction.HANDOFF:
            return stored.with_operation(info)
        return escalated(info, codes)
    return None if stored is None else stored.with_operation(info)
