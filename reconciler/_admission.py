"""One door for envelopes: whatever enters the guard must mean what its code's verdict says.

An adapter, a `ToolError`, a lookup, a rendering read back or a ledger row can all hand over an
envelope whose
typed fields disagree with its code (INPUT_INVALID marked retryable, ACCESS_DENIED naming a
field). The guard acts on the typed fields, so such an envelope would steer it wrong: it fails
closed instead, to UNKNOWN_ERROR (no retry, side effects unknown) with the envelope it replaced
kept as evidence and the reason as its `cause`.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from writesafe.ledger import OperationRecord
from writesafe.reconciler._causes import Untrusted
from writesafe.reconciler._classify import Classification
from writesafe.reconciler._contract import Code, CodeRegistry, ErrorEnvelope, SideEffects
from writesafe.reconciler._retry_after import MAX_RETRY_AFTER_MS

logger = logging.getLogger("writesafe")


def disagreement(envelope: ErrorEnvelope, codes: CodeRegistry, *, proven: bool) -> Untrusted | None:
    """Why `envelope` cannot be trusted as its code, or None when it agrees with the verdict.

    `proven`: the producer may prove that an UNKNOWN_ERROR had no effect (an adapter's own rule
    can; a foreign envelope cannot, so it may not talk its way out of "unknown").
    """
    if envelope.code not in codes:
        return Untrusted.UNREGISTERED_CODE
    verdict = codes.verdict(envelope.code)
    narrowed = envelope.code == Code.UNKNOWN_ERROR and envelope.side_effects is SideEffects.NONE
    if narrowed and not proven:
        return Untrusted.UNPROVEN_NO_EFFECT
    if (
        envelope.retryable != verdict.retryable
        or envelope.next_action is not verdict.next_action
        or (envelope.side_effects is not verdict.side_effects and not narrowed)
    ):
        return Untrusted.VERDICT_CONTRADICTED
    if verdict.names_field and envelope.field is None:
        return Untrusted.FIELD_MISSING
    if not verdict.names_field and envelope.field is not None:
        return Untrusted.FIELD_UNEXPECTED
    if envelope.retry_after_ms is not None and envelope.retry_after_ms > MAX_RETRY_AFTER_MS:
        return Untrusted.DELAY_OUT_OF_RANGE
    return None


def untrusted(
    reason: Untrusted, detail: str, evidence: dict[str, Any], codes: CodeRegistry
) -> Classification:
    """UNKNOWN_ERROR for an answer that failed closed for `reason`, keeping `evidence`."""
    envelope = codes.envelope(Code.UNKNOWN_ERROR, f"untrusted answer: {detail}", cause=reason.value)
    return Classification(envelope, {"untrusted": reason.value, **evidence})


def admit(
    classification: Classification, codes: CodeRegistry, *, source: str, proven: bool = True
) -> Classification:
    """`classification` if its envelope agrees with its code's verdict, else UNKNOWN_ERROR.

    `source` names the producer (an adapter's `name/version`) in the log and the evidence.
    """
    envelope = classification.envelope
    reason = disagreement(envelope, codes, proven=proven)
    if reason is None:
        return classification
    logger.warning("%s produced %s that fails closed: %s", source, envelope.code, reason.value)
    evidence = {**classification.evidence, "source": source, "envelope": envelope.to_json_dict()}
    return untrusted(reason, f"{source} produced {envelope.code}: {reason.value}", evidence, codes)


def admit_stored(text: str, codes: CodeRegistry, *, source: str) -> ErrorEnvelope:
    """The envelope a ledger row holds, through the same door as every other.

    The guard, the replay gate and the read models act on a stored envelope as on a fresh one,
    and a row can be edited, migrated or written by another version: one that no longer
    validates or disagrees with its code's verdict reads as UNKNOWN_ERROR (no retry), the raw
    text stays in the row as the evidence, and the replacement is logged with it. `source`
    names the row (`scope/key`). An adapter's rule may have proved UNKNOWN_ERROR had no effect
    before the row was written, so such a narrowing stands.
    """
    try:
        envelope = ErrorEnvelope.model_validate_json(text)
    except ValidationError:
        reason = Untrusted.INVALID_ENVELOPE
        detail = f"the envelope stored for {source} is not one"
    else:
        found = disagreement(envelope, codes, proven=True)
        if found is None:
            return envelope
        reason = found
        detail = f"the {envelope.code} stored for {source}: {reason.value}"
    logger.warning("the envelope stored for %s fails closed: %s %r", source, reason, text)
    return untrusted(reason, detail, {}, codes).envelope


def stored_envelope(operation: OperationRecord, codes: CodeRegistry) -> ErrorEnvelope | None:
    """The envelope `operation` ended with, admitted (`admit_stored`); None if it has none."""
    if operation.error is None:
        return None
    return admit_stored(operation.error, codes, source=f"{operation.scope}/{operation.key}")
