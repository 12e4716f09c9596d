"""INTERIM until the contract's CallToolResult rendering lands (branch `contract`)."""

from __future__ import annotations

import json

from mcp.types import CallToolResult, TextContent

from reconciler import ErrorEnvelope


def error_result(envelope: ErrorEnvelope) -> CallToolResult:
    data = envelope.to_json_dict()
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data))],
        structured_content={"error": data},
        is_error=True,
    )
