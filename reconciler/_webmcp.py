"""The envelope in the seven WebMCP-style tool error codes, as an object and as a line of text.

Those seven codes are coarser than the contract, so the rendered error carries the full envelope
in `details`; a reader that gets only a bare WebMCP code (or the text line hosts show models,
`Error [code]: message`) reads it cautiously: anything that may have run is OUTCOME_UNKNOWN, and
nothing bare is retried automatically.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from writesafe.reconciler._causes import Lost, Untrusted
from writesafe.reconciler._classify import Classification
from writesafe.reconciler._contract import CODES, Code, CodeRegistry, ErrorEnvelope, NextAction
from writesafe.reconciler._wire import Malformed, malformed, read_envelope


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
"""The WebMCP code of each built-in code; OUTCOME_UNKNOWN by how it was lost (`LOST_CODES`)."""

LOST_CODES: dict[str, WebMcpCode] = {
    Lost.TIMEOUT: _W.TIMEOUT,
    Lost.INTERRUPTED: _W.INTERRUPTED,
    Lost.CANCELLED: _W.CANCELLED,
}
"""OUTCOME_UNKNOWN's WebMCP code by its cause: no answer in time is `timeout`, a cancelled call
`cancelled`, a broken connection (or no stated cause) `interrupted`."""

WEBMCP_CODES_BY_ACTION: dict[NextAction, WebMcpCode] = {
    NextAction.CORRECT_INPUT: _W.INVALID_INPUT,
    NextAction.AUTHENTICATE: _W.NEEDS_USER,
    NextAction.STOP: _W.FAILED,
    NextAction.RETRY_AFTER_DELAY: _W.UNAVAILABLE,
    NextAction.RECONCILE: _W.INTERRUPTED,
    NextAction.HANDOFF: _W.FAILED,
}
"""The WebMCP code of a registered user code, by its next action."""

BARE_READINGS: dict[WebMcpCode, tuple[Code, str]] = {
    _W.CANCELLED: (Code.OUTCOME_UNKNOWN, Lost.CANCELLED.value),
    _W.INTERRUPTED: (Code.OUTCOME_UNKNOWN, Lost.INTERRUPTED.value),
    _W.TIMEOUT: (Code.OUTCOME_UNKNOWN, Lost.TIMEOUT.value),
    _W.UNAVAILABLE: (Code.UNKNOWN_ERROR, Untrusted.TOOL_UNAVAILABLE.value),
    _W.INVALID_INPUT: (Code.UNKNOWN_ERROR, Untrusted.FIELD_MISSING.value),
    _W.NEEDS_USER: (Code.AUTH_REQUIRED, ""),
    _W.FAILED: (Code.UNKNOWN_ERROR, Untrusted.BARE_FAILURE.value),
}
"""The contract code (and cause) a bare WebMCP code is read as. `unavailable` means "no such tool
here right now", not "try again": UNKNOWN_ERROR, never retried. A bare `invalid_input` names no
field, so the caller could not correct anything: it fails closed like INPUT_INVALID without one."""

TEXT_FORM = re.compile(r"\AError \[(?P<code>[a-z_]+)\]: (?P<message>.*)\Z", re.DOTALL)
"""`Error [code]: message`, the line WebMCP hosts show a model."""


def webmcp_code(envelope: ErrorEnvelope) -> WebMcpCode:
    """Which of the seven codes `envelope` is."""
    if envelope.code == Code.OUTCOME_UNKNOWN:
        return LOST_CODES.get(envelope.cause or "", _W.INTERRUPTED)
    return WEBMCP_CODES.get(envelope.code) or WEBMCP_CODES_BY_ACTION[envelope.next_action]


def to_webmcp(envelope: ErrorEnvelope) -> dict[str, Any]:
    """`{"code", "message", "details": envelope}` with `code` one of the seven."""
    code = webmcp_code(envelope)
    return {"code": code.value, "message": envelope.message, "details": envelope.to_json_dict()}


def to_webmcp_text(envelope: ErrorEnvelope) -> str:
    """`Error [code]: message`; the typed fields travel only in `to_webmcp`'s `details`."""
    return f"Error [{webmcp_code(envelope).value}]: {envelope.message}"


def from_webmcp(error: object, codes: CodeRegistry = CODES) -> Classification:
    """The envelope in `details`, else the cautious reading of the bare code, else UNKNOWN_ERROR."""
    if not isinstance(error, dict):
        detail = f"a WebMCP error is an object, not {type(error).__name__}"
        return malformed(Malformed(Untrusted.NOT_AN_OBJECT, detail), error, codes)
    if "details" in error:
        return read_envelope(error["details"], codes)
    return _bare(error.get("code"), error.get("message"), error, codes)


def from_webmcp_text(text: str, codes: CodeRegistry = CODES) -> Classification:
    """The cautious reading of an `Error [code]: message` line."""
    matched = TEXT_FORM.match(text) if isinstance(text, str) else None
    if matched is None:
        detail = "not an `Error [code]: message` line"
        return malformed(Malformed(Untrusted.NOT_WEBMCP, detail), text, codes)
    return _bare(matched["code"], matched["message"], text, codes)


def _bare(value: object, message: object, raw: object, codes: CodeRegistry) -> Classification:
    if not (isinstance(value, str) and value in _SEVEN):
        detail = "not one of the seven WebMCP error codes"
        return malformed(Malformed(Untrusted.NOT_WEBMCP, detail), raw, codes)
    code = WebMcpCode(value)
    text = message if isinstance(message, str) and message else f"WebMCP error {code.value}"
    contract_code, cause = BARE_READINGS[code]
    envelope = codes.envelope(contract_code, text, cause=cause or None)
    return Classification(envelope, {"webmcp": code.value})


_SEVEN = frozenset(code.value for code in WebMcpCode)
