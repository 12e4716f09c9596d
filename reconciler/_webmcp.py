"""The envelope in the seven WebMCP-style tool error codes.

Those seven codes are coarser than the contract, so the rendered error carries the full envelope
in `details`; a reader that gets only a bare WebMCP code falls back to the most cautious contract
code for it (anything that may have run is OUTCOME_UNKNOWN).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from reconciler._classify import Classification
from reconciler._contract import CODES, Code, CodeRegistry, ErrorEnvelope, NextAction
from reconciler._wire import malformed, read_envelope


class WebMcpCode(StrEnum):
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    INVALID_INPUT = "invalid_input"
    NEEDS_USER = "needs_user"
    FAILED = "failed"


_W = WebMcpCode

WEBMCP_CODES: dict[str, WebMcpCode] = {
    Code.INPUT_INVALID: _W.INVALID_INPUT,
    Code.AUTH_REQUIRED: _W.NEEDS_USER,
    Code.ACCESS_DENIED: _W.FAILED,
    Code.TEMP_UNAVAILABLE: _W.UNAVAILABLE,
    Code.DEPENDENCY_BUSY: _W.UNAVAILABLE,
    Code.RATE_LIMITED: _W.UNAVAILABLE,
    Code.OUTCOME_UNKNOWN: _W.INTERRUPTED,
    Code.IN_PROGRESS: _W.TIMEOUT,
    Code.KEY_REUSED: _W.INVALID_INPUT,
    Code.RETRY_EXHAUSTED: _W.FAILED,
    Code.UNKNOWN_ERROR: _W.FAILED,
    Code.RESULT_NOT_STORED: _W.FAILED,
}
"""The WebMCP code of each built-in code. Nothing writesafe produces is `cancelled`: a cancelled
write may have run, so the guard reports it as OUTCOME_UNKNOWN (rendered `interrupted`)."""

WEBMCP_CODES_BY_ACTION: dict[NextAction, WebMcpCode] = {
    NextAction.CORRECT_INPUT: _W.INVALID_INPUT,
    NextAction.AUTHENTICATE: _W.NEEDS_USER,
    NextAction.STOP: _W.FAILED,
    NextAction.RETRY_AFTER_DELAY: _W.UNAVAILABLE,
    NextAction.RECONCILE: _W.INTERRUPTED,
    NextAction.HANDOFF: _W.FAILED,
}
"""The WebMCP code of a registered user code, by its next action."""

CONTRACT_CODES: dict[WebMcpCode, Code] = {
    _W.CANCELLED: Code.OUTCOME_UNKNOWN,
    _W.INTERRUPTED: Code.OUTCOME_UNKNOWN,
    _W.TIMEOUT: Code.OUTCOME_UNKNOWN,
    _W.UNAVAILABLE: Code.TEMP_UNAVAILABLE,
    _W.INVALID_INPUT: Code.INPUT_INVALID,
    _W.NEEDS_USER: Code.AUTH_REQUIRED,
    _W.FAILED: Code.UNKNOWN_ERROR,
}
"""The contract code a bare WebMCP code (no envelope in `details`) is read as."""


def to_webmcp(envelope: ErrorEnvelope) -> dict[str, Any]:
    """`{"code", "message", "details": envelope}` with `code` one of the seven."""
    code = WEBMCP_CODES.get(envelope.code) or WEBMCP_CODES_BY_ACTION[envelope.next_action]
    return {"code": code.value, "message": envelope.message, "details": envelope.to_json_dict()}


def from_webmcp(error: object, codes: CodeRegistry = CODES) -> Classification:
    """The envelope in `details`, else the cautious reading of the bare code, else UNKNOWN_ERROR."""
    if not isinstance(error, dict):
        return malformed(f"a WebMCP error is an object, not {type(error).__name__}", error, codes)
    if "details" in error:
        return read_envelope(error["details"], codes)
    code = _webmcp_code(error.get("code"))
    if code is None:
        return malformed("not one of the seven WebMCP error codes", error, codes)
    message = error.get("message")
    text = message if isinstance(message, str) and message else f"WebMCP error {code.value}"
    envelope = codes.envelope(CONTRACT_CODES[code], text)
    return Classification(envelope, {"webmcp": code.value})


def _webmcp_code(value: object) -> WebMcpCode | None:
    return WebMcpCode(value) if isinstance(value, str) and value in _SEVEN else None


_SEVEN = frozenset(code.value for code in WebMcpCode)
