"""A value offered as a tool's result that does not fit its return annotation, and what follows.

The same rule judges every door a result comes through: a write's return value, a lookup's
`Found`, an operator's resolution and a stored record read back. A write's result that does not
fit came from a write that ran, so its effect may exist: the operation is neither `succeeded`
(nobody would get a result of the declared type) nor run again (it may have been applied); it
goes to a person, with the value's excerpt as evidence (`misfit_outcome`).
"""

from __future__ import annotations

from typing import Any

from writesafe.ledger import Outcome, Status, dumps_json
from writesafe.reconciler._classify import EVIDENCE_MESSAGE_LIMIT
from writesafe.reconciler._contract import Code, CodeRegistry, ErrorEnvelope, OperationInfo
from writesafe.reconciler._escalation import escalated

RESULT_INVALID = "result_invalid"
"""The cause of a replay whose stored result no longer fits the tool's return annotation."""

_PROBLEMS_KEPT = 3


class ResultMisfit(ValueError):
    """`value` does not fit the tool's declared return type; `problems`: the first validation
    errors, as `(location, message)` pairs."""

    def __init__(self, value: Any, problems: list[tuple[str, str]]) -> None:
        where, what = problems[0] if problems else ("", "does not fit")
        super().__init__(f"the result does not fit the declared type: {where or 'result'}: {what}")
        self.problems = problems[:_PROBLEMS_KEPT]
        self.evidence: dict[str, Any] = {
            "reason": "does_not_fit",
            "type": type(value).__name__,
            "excerpt": repr(value)[:EVIDENCE_MESSAGE_LIMIT],
            "problems": [{"loc": loc, "msg": msg} for loc, msg in self.problems],
        }


def misfit_outcome(misfit: ResultMisfit, evidence: dict[str, Any], codes: CodeRegistry) -> Outcome:
    """What the ledger records for a write whose result does not fit: `needs_attention`, with
    the handoff every caller of the key gets and `evidence` (the misfit's, redacted)."""
    envelope = escalated_misfit(misfit, None, codes)
    return Outcome(
        status=Status.NEEDS_ATTENTION,
        error=dumps_json(envelope.to_json_dict()),
        code=envelope.code,
        evidence=dumps_json(evidence),
    )


def escalated_misfit(
    misfit: ResultMisfit, info: OperationInfo | None, codes: CodeRegistry
) -> ErrorEnvelope:
    """The handoff for an operation escalated because a result did not fit."""
    return escalated(info, codes, f"the write returned a result that {_what(misfit)}")


def replay_misfit(misfit: ResultMisfit, info: OperationInfo, codes: CodeRegistry) -> ErrorEnvelope:
    """The answer to a replay whose stored result does not fit the tool's return annotation (it
    changed since the result was stored): a handoff, never the value as something it is not.
    The record is left as it is: it is the evidence."""
    return codes.envelope(
        Code.UNKNOWN_ERROR,
        f"the stored result {_what(misfit)}; an operator must look at the tool's declared type",
        cause=RESULT_INVALID,
        operation=info,
    )


def _what(misfit: ResultMisfit) -> str:
    where, what = misfit.problems[0] if misfit.problems else ("", "does not fit")
    return f"does not fit the tool's return annotation ({where or 'result'}: {what})"
