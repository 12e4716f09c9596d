"""Conformance vectors of `writesafe.error/1`: inputs and what a conforming reader makes of them.

Published as docs/schema/writesafe.error.1.vectors.json (`writesafe contract vectors`), used by
our own tests and usable by any client: every built-in code in every rendering (what writesafe
emits, and that reading it back gives the envelope), every fail-closed reason a reader can meet
(with the exact `cause` it must stop with), and the HTTP preset's statuses.
"""

from __future__ import annotations

import json
from typing import Any

from writesafe.reconciler._causes import Untrusted
from writesafe.reconciler._contract import CODES, Code, ErrorEnvelope, OperationInfo
from writesafe.reconciler._http_preset import HTTP_ADAPTER
from writesafe.reconciler._mcp import to_call_tool_result
from writesafe.reconciler._problem import to_problem
from writesafe.reconciler._response import RawResponse
from writesafe.reconciler._webmcp import to_webmcp, to_webmcp_text
from writesafe.reconciler._wire import PARSE_LIMIT

VECTORS_SCHEMA = "writesafe.error/1 conformance vectors"

_OPERATION = OperationInfo(key="ord-7", status="failed", attempt=1, attempts_left=2)
_INVALID = CODES.envelope(Code.INPUT_INVALID, "postcode is not served", field="postcode")
_DENIED = CODES.envelope(Code.ACCESS_DENIED, "not yours")
_UNKNOWN = CODES.envelope(Code.UNKNOWN_ERROR, "no idea")
_U = Untrusted


def _wire(envelope: ErrorEnvelope, **changes: Any) -> dict[str, Any]:
    return {**envelope.to_json_dict(), **changes}


def _mcp(error: dict[str, Any], *, text: str | None = None, **changes: Any) -> dict[str, Any]:
    """An MCP error result's wire form carrying `error` in both copies (or `text` as its text)."""
    shown = json.dumps(error, separators=(",", ":")) if text is None else text
    return {
        "content": [{"type": "text", "text": shown}],
        "structuredContent": {"error": error},
        "isError": True,
        **changes,
    }


FAIL_CLOSED: list[tuple[str, str, Any, Untrusted]] = [
    ("envelope", "not JSON", "{\"code\": ", _U.NOT_JSON),
    ("envelope", "larger than the parse limit", {"$padded": "{}", "bytes": PARSE_LIMIT + 1},
     _U.TOO_LARGE),
    ("envelope", "not an object", [1, 2], _U.NOT_AN_OBJECT),
    ("envelope", "a wrong type", _wire(_INVALID, retryable="false"), _U.INVALID_ENVELOPE),
    ("envelope", "an unknown member", _wire(_INVALID, extra=1), _U.INVALID_ENVELOPE),
    ("envelope", "an unregistered code", _wire(_INVALID, code="VALIDATION_FAILED"),
     _U.UNREGISTERED_CODE),
    ("envelope", "INPUT_INVALID marked retryable", _wire(_INVALID, retryable=True),
     _U.VERDICT_CONTRADICTED),
    ("envelope", "INPUT_INVALID without a field", _wire(_INVALID, field=None), _U.FIELD_MISSING),
    ("envelope", "ACCESS_DENIED naming a field", _wire(_DENIED, field="postcode"),
     _U.FIELD_UNEXPECTED),
    ("envelope", "AUTH_REQUIRED naming a field",
     _wire(CODES.envelope(Code.AUTH_REQUIRED, "log in"), field="postcode"), _U.FIELD_UNEXPECTED),
    ("envelope", "UNKNOWN_ERROR naming a field", _wire(_UNKNOWN, field="postcode"),
     _U.FIELD_UNEXPECTED),
    ("envelope", "an absurd delay", _wire(_INVALID, retry_after_ms=10**12),
     _U.DELAY_OUT_OF_RANGE),
    ("envelope", "a foreign UNKNOWN_ERROR claiming no effect",
     _wire(_UNKNOWN, side_effects="none"), _U.UNPROVEN_NO_EFFECT),
    ("mcp", "not an error result", _mcp(_wire(_INVALID), isError=False), _U.NOT_AN_ERROR),
    ("mcp", "not a completed result", _mcp(_wire(_INVALID), resultType="input_required"),
     _U.NOT_COMPLETE),
    ("mcp", "empty content", _mcp(_wire(_INVALID), content=[]), _U.EMPTY_CONTENT),
    ("mcp", "no envelope in either copy", {"content": [{"type": "image", "data": "",
     "mimeType": "image/png"}], "isError": True}, _U.NO_ENVELOPE),
    ("mcp", "copies that disagree", _mcp(_wire(_INVALID),
     text=json.dumps(_wire(_INVALID, field="sku"))), _U.COPIES_DISAGREE),
    ("mcp", "a text copy that is prose", _mcp(_wire(_INVALID), text="it broke"),
     _U.COPIES_DISAGREE),
    ("mcp", "a field where none belongs", _mcp(_wire(_DENIED, field="postcode")),
     _U.FIELD_UNEXPECTED),
    ("problem", "a plain problem without an envelope",
     {"type": "about:blank", "title": "Not Found", "status": 404}, _U.INVALID_ENVELOPE),
    ("webmcp", "not one of the seven codes", {"code": "exploded"}, _U.NOT_WEBMCP),
    ("webmcp", "a bare unavailable: no such tool here now", {"code": "unavailable"},
     _U.TOOL_UNAVAILABLE),
    ("webmcp", "a bare invalid_input names no field", {"code": "invalid_input"},
     _U.FIELD_MISSING),
    ("webmcp", "a bare failed", {"code": "failed"}, _U.BARE_FAILURE),
    ("webmcp_text", "not the text form", "it broke", _U.NOT_WEBMCP),
]  # fmt: skip
"""(rendering, what is wrong, input, the cause a reader must stop with)."""

NOT_FROM_READERS: dict[str, str] = {
    _U.NO_RULE: "an adapter recognised no rule for a response (see `http_preset`: 409)",
    _U.REFUSED_REQUEST: "the HTTP preset's refused client errors (see `http_preset`: 404)",
    _U.ADAPTER_FAILED: "an adapter or one of its predicates raised",
    _U.UNCLASSIFIED_EXCEPTION: "a tool raised an exception no classification knows",
    _U.NO_STORED_FAILURE: "a failed operation's stored envelope is missing (a damaged ledger)",
    _U.ABSENT_AFTER_UNCLASSIFIED: "a lookup proved absent the effect of an unclassified failure",
}
"""Fail-closed causes that no wire input can produce: they arise inside the producer."""

_PRESET_CASES: list[tuple[int, dict[str, Any]]] = [
    (400, {"field": "sku"}), (400, {"error": "unexpected"}), (401, {}), (403, {}), (404, {}),
    (408, {}), (409, {"reason": "NEW_UNKNOWN_CONFLICT"}), (412, {}), (422, {"field": "postcode"}),
    (422, {}), (429, {}), (500, {}), (502, {}), (503, {}), (504, {}),
]  # fmt: skip


def vectors() -> dict[str, Any]:
    """The conformance vectors document."""
    return {
        "schema": VECTORS_SCHEMA,
        "conventions": {
            "$padded": "an input {'$padded': TEXT, 'bytes': N} is TEXT followed by spaces up to "
            "N bytes",
            "reading": "every `fail_closed` input must read as UNKNOWN_ERROR, retryable false, "
            "side_effects unknown, field null, with `cause` as given",
        },
        "verdicts": {
            code: {
                "side_effects": verdict.side_effects.value,
                "retryable": verdict.retryable,
                "next_action": verdict.next_action.value,
                "stops_as": verdict.disposition.value if verdict.disposition else None,
                "names_field": verdict.names_field,
            }
            for code, verdict in CODES.verdicts().items()
        },
        "renderings": [_renderings(envelope) for envelope in emitted()],
        "fail_closed": [
            {"rendering": rendering, "case": case, "input": data, "cause": cause.value}
            for rendering, case, data, cause in FAIL_CLOSED
        ],
        "fail_closed_inside_producers": NOT_FROM_READERS,
        "http_preset": [
            {"status": status, "body": body, "expected": _preset(status, body)}
            for status, body in _PRESET_CASES
        ],
    }


def emitted() -> list[ErrorEnvelope]:
    """Every built-in code, with and without the optional members (a field where its verdict
    names one, and only there), and each cause the renderings tell apart."""
    made = []
    for code in Code:
        field = "postcode" if CODES.verdict(code).names_field else None
        made.append(CODES.envelope(code, f"{code} happened", field=field))
        made.append(
            CODES.envelope(
                code, "with everything", field=field, retry_after_ms=1500, operation=_OPERATION
            )
        )
    for cause in ("timeout", "interrupted", "cancelled"):
        made.append(CODES.envelope(Code.OUTCOME_UNKNOWN, "no answer", cause=cause))
    made.append(CODES.envelope(Code.RETRY_EXHAUSTED, "gave up", cause=Code.DEPENDENCY_BUSY))
    return made


def _renderings(envelope: ErrorEnvelope) -> dict[str, Any]:
    problem = to_problem(envelope)
    return {
        "envelope": envelope.to_json_dict(),
        "mcp": to_call_tool_result(envelope).model_dump(
            mode="json", by_alias=True, exclude_none=True
        ),
        "problem": {"status": problem.status, "headers": problem.headers, "body": problem.body},
        "webmcp": to_webmcp(envelope),
        "webmcp_text": to_webmcp_text(envelope),
    }


def _preset(status: int, body: dict[str, Any]) -> dict[str, Any]:
    response = RawResponse(status, (), json.dumps(body).encode())
    envelope = HTTP_ADAPTER.classify_response(response, CODES).envelope
    return {
        "code": envelope.code,
        "field": envelope.field,
        "side_effects": envelope.side_effects.value,
        "cause": envelope.cause,
    }
