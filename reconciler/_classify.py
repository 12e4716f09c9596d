"""Built-in classification of exceptions by one question: could the request have reached downstream?

Nothing sent (connection refused, connect or pool timeout) → no effect, retryable.
Sent and then lost (read timeout, protocol error, reset, cancellation, any timeout) → unknown.
Anything else → UNKNOWN_ERROR, which fails closed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx

from writesafe.reconciler._causes import Lost, Untrusted
from writesafe.reconciler._contract import Code, CodeRegistry, ErrorEnvelope, sanitize_message
from writesafe.reconciler._redaction import Redaction, redact_text
from writesafe.reconciler._tool_error import ToolError

EVIDENCE_MESSAGE_LIMIT = 1024

_NOTHING_SENT: tuple[type[BaseException], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    ConnectionRefusedError,
)
_SENT_THEN_LOST: tuple[type[BaseException], ...] = (
    TimeoutError,
    asyncio.CancelledError,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
)


@dataclass(frozen=True, slots=True)
class Classification:
    """An envelope plus the raw evidence it was derived from (stored on the attempt)."""

    envelope: ErrorEnvelope
    evidence: dict[str, Any] = field(default_factory=dict)

    def redacted(self, redaction: Redaction) -> Classification:
        """This classification as it may be kept and shown: message and evidence redacted."""
        envelope = self.envelope
        message = sanitize_message(redaction.text(envelope.message))
        if message != envelope.message:
            envelope = envelope.model_copy(update={"message": message})
        return Classification(envelope, redaction.evidence(self.evidence))


def exception_evidence(error: BaseException) -> dict[str, Any]:
    """What is worth keeping of an exception: its type and a bounded message, never a traceback.

    The message is redacted before it is cut, so that a cut cannot leave half a secret behind
    that no rule recognises any more.
    """
    return {
        "exception": f"{type(error).__module__}.{type(error).__qualname__}",
        "message": redact_text(str(error))[:EVIDENCE_MESSAGE_LIMIT],
    }


def classify_exception(error: BaseException, codes: CodeRegistry) -> Classification:
    """Map an exception raised by a write to an envelope; anything unrecognised fails closed."""
    evidence = exception_evidence(error)
    if isinstance(error, ToolError):
        envelope = codes.envelope(
            error.code, error.message, field=error.field, retry_after_ms=error.retry_after_ms
        )
        return Classification(envelope, {**evidence, **error.evidence})
    # Order matters: httpx.ConnectTimeout is also a timeout, but one that sent nothing.
    if isinstance(error, _NOTHING_SENT):
        message = f"the request was not sent: {type(error).__name__}"
        return Classification(codes.envelope(Code.TEMP_UNAVAILABLE, message), evidence)
    if isinstance(error, _SENT_THEN_LOST):
        message = f"the request may have been applied: {type(error).__name__} after sending"
        envelope = codes.envelope(Code.OUTCOME_UNKNOWN, message, cause=_lost(error).value)
        return Classification(envelope, evidence)
    message = f"unclassified failure {type(error).__name__}"
    envelope = codes.envelope(
        Code.UNKNOWN_ERROR, message, cause=Untrusted.UNCLASSIFIED_EXCEPTION.value
    )
    return Classification(envelope, evidence)


def _lost(error: BaseException) -> Lost:
    if isinstance(error, asyncio.CancelledError):
        return Lost.CANCELLED
    if isinstance(error, TimeoutError | httpx.TimeoutException):
        return Lost.TIMEOUT
    return Lost.INTERRUPTED
