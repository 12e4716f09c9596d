"""The envelope as an MCP `CallToolResult`: `isError`, `structuredContent.error`, and a text block.

Many hosts show only the text content, so the text block carries the same envelope JSON as
`structuredContent.error`. Reading back checks both copies: a result that is not a completed
error, carries no content, or whose copies disagree is not trusted.
Uses `mcp_types`, the wire types the `mcp` SDK re-exports as `mcp.types`, without its transports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from writesafe.reconciler._causes import Untrusted
from writesafe.reconciler._classify import Classification
from writesafe.reconciler._contract import CODES, CodeRegistry, ErrorEnvelope
from writesafe.reconciler._wire import Malformed, malformed, parse_envelope

STRUCTURED_ERROR_KEY = "error"
COMPLETE = "complete"
"""The `resultType` of a final result (absent means the same)."""


def to_call_tool_result(envelope: ErrorEnvelope) -> CallToolResult:
    """An error result a model can read and software can branch on."""
    wire = envelope.to_json_dict()
    text = json.dumps(wire, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content={STRUCTURED_ERROR_KEY: wire},
        is_error=True,
    )


def from_call_tool_result(
    result: CallToolResult | Mapping[str, Any], codes: CodeRegistry = CODES
) -> Classification:
    """The envelope of an error result (the SDK's model or its JSON wire form), or UNKNOWN_ERROR
    whose `cause` says why the result carries none that can be trusted."""
    try:
        envelope = _envelope_of(_result(result), codes)
    except Malformed as error:
        raw = result.model_dump(mode="json") if isinstance(result, CallToolResult) else result
        return malformed(error, raw, codes)
    return Classification(envelope, {"envelope": envelope.to_json_dict()})


def _result(result: CallToolResult | Mapping[str, Any]) -> CallToolResult:
    if isinstance(result, CallToolResult):
        return result
    if not isinstance(result, Mapping):
        raise Malformed(Untrusted.NOT_AN_OBJECT, "a tool result is a JSON object")
    try:
        return CallToolResult.model_validate(dict(result))
    except ValidationError:
        raise Malformed(Untrusted.NO_ENVELOPE, "not a CallToolResult") from None


def _envelope_of(result: CallToolResult, codes: CodeRegistry) -> ErrorEnvelope:
    if not result.is_error:
        raise Malformed(Untrusted.NOT_AN_ERROR, "the tool result is not an error")
    if result.result_type not in (None, COMPLETE):
        raise Malformed(Untrusted.NOT_COMPLETE, "the tool result is not a completed one")
    if not result.content:
        raise Malformed(Untrusted.EMPTY_CONTENT, "the error result has no content")
    texts = {block.text for block in result.content if isinstance(block, TextContent)}
    structured = result.structured_content
    if not (isinstance(structured, dict) and STRUCTURED_ERROR_KEY in structured):
        if not texts:
            raise Malformed(Untrusted.NO_ENVELOPE, "the error result carries no envelope")
        if len(texts) > 1:
            raise Malformed(Untrusted.COPIES_DISAGREE, "the error result's text blocks differ")
        return parse_envelope(texts.pop(), codes)
    envelope = parse_envelope(structured[STRUCTURED_ERROR_KEY], codes)
    for text in texts:
        try:
            agrees = parse_envelope(text, codes) == envelope
        except Malformed:
            agrees = False
        if not agrees:
            raise Malformed(Untrusted.COPIES_DISAGREE, "the structured and text copies disagree")
    return envelope
