"""The envelope as an MCP `CallToolResult`: `isError`, `structuredContent.error`, and a text block.

Many hosts show only the text content, so the text block carries the same envelope JSON as
`structuredContent.error`. Reading back prefers the structured copy and falls back to the text.
Uses `mcp_types`, the wire types the `mcp` SDK re-exports as `mcp.types`, without its transports.
"""

from __future__ import annotations

import json

from mcp_types import CallToolResult, TextContent

from reconciler._classify import Classification
from reconciler._contract import CODES, CodeRegistry, ErrorEnvelope
from reconciler._wire import malformed, read_envelope

STRUCTURED_ERROR_KEY = "error"


def to_call_tool_result(envelope: ErrorEnvelope) -> CallToolResult:
    """An error result a model can read and software can branch on."""
    wire = envelope.to_json_dict()
    text = json.dumps(wire, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content={STRUCTURED_ERROR_KEY: wire},
        is_error=True,
    )


def from_call_tool_result(result: CallToolResult, codes: CodeRegistry = CODES) -> Classification:
    """The envelope of an error result, or UNKNOWN_ERROR when it carries no valid one."""
    if not result.is_error:
        return malformed("the tool result is not an error", result.model_dump(mode="json"), codes)
    structured = result.structured_content
    if isinstance(structured, dict) and STRUCTURED_ERROR_KEY in structured:
        return read_envelope(structured[STRUCTURED_ERROR_KEY], codes)
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    if len(texts) == 1:
        return read_envelope(texts[0], codes)
    return malformed("the error result carries no envelope", result.model_dump(mode="json"), codes)
