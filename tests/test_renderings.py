"""One envelope, three renderings: each reads back to the same envelope, and fails closed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types import CallToolResult, TextContent

from reconciler import (
    CODES,
    HTTP_STATUS,
    PROBLEM_MEDIA_TYPE,
    WEBMCP_CODES,
    Code,
    CodeRegistry,
    Disposition,
    ErrorEnvelope,
    NextAction,
    OperationInfo,
    SideEffects,
    Verdict,
    WebMcpCode,
    from_call_tool_result,
    from_problem,
    from_webmcp,
    to_call_tool_result,
    to_problem,
    to_webmcp,
)

OPERATION = OperationInfo(key="ord-7", status="failed", attempt=1, attempts_left=2)


def envelopes() -> list[ErrorEnvelope]:
    """Every built-in code, with and without the optional fields."""
    made = []
    for code in Code:
        made.append(CODES.envelope(code, f"{code} happened"))
        made.append(
            CODES.envelope(
                code, "with everything", field="postcode", retry_after_ms=1500, operation=OPERATION
            )
        )
    return made


ALL = envelopes()


def test_every_builtin_code_has_one_row_in_each_table() -> None:
    assert set(HTTP_STATUS) == set(Code)
    assert set(WEBMCP_CODES) == set(Code)


@pytest.mark.parametrize("envelope", ALL, ids=lambda e: e.code)
def test_mcp_round_trip(envelope: ErrorEnvelope) -> None:
    result = to_call_tool_result(envelope)
    wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire["isError"] is True
    assert wire["structuredContent"] == {"error": envelope.to_json_dict()}
    [block] = wire["content"]
    assert block["type"] == "text"
    assert json.loads(block["text"]) == envelope.to_json_dict()
    # Through JSON and back, as a host would see it.
    received = CallToolResult.model_validate_json(result.model_dump_json(by_alias=True))
    assert from_call_tool_result(received).envelope == envelope


def test_mcp_reads_the_text_block_when_structured_content_is_dropped() -> None:
    envelope = ALL[1]
    result = to_call_tool_result(envelope)
    stripped = CallToolResult(content=result.content, is_error=True)
    assert from_call_tool_result(stripped).envelope == envelope


@pytest.mark.parametrize(
    "result",
    [
        CallToolResult(content=[TextContent(type="text", text="it broke")], is_error=True),
        CallToolResult(content=[], is_error=True),
        CallToolResult(content=[TextContent(type="text", text="{}")], is_error=False),
        CallToolResult(content=[], structured_content={"error": {"code": "X"}}, is_error=True),
    ],
    ids=["prose", "empty", "not-an-error", "invalid-envelope"],
)
def test_mcp_without_a_valid_envelope_fails_closed(result: CallToolResult) -> None:
    classification = from_call_tool_result(result)
    assert classification.envelope.code == Code.UNKNOWN_ERROR
    assert classification.envelope.side_effects is SideEffects.UNKNOWN
    assert "raw" in classification.evidence


@pytest.mark.parametrize("envelope", ALL, ids=lambda e: e.code)
def test_problem_round_trip(envelope: ErrorEnvelope) -> None:
    problem = to_problem(envelope, instance="/v1/operations/ord-7")
    status, title = HTTP_STATUS[envelope.code]
    assert problem.status == status == problem.body["status"]
    assert problem.body["title"] == title
    assert problem.body["type"].endswith(envelope.code)
    assert problem.body["detail"] == envelope.message
    assert problem.body["instance"] == "/v1/operations/ord-7"
    assert problem.headers["Content-Type"] == PROBLEM_MEDIA_TYPE
    if envelope.retry_after_ms is None:
        assert "Retry-After" not in problem.headers
    else:
        assert problem.headers["Retry-After"] == "2"  # 1500 ms, rounded up to whole seconds
    assert from_problem(json.dumps(problem.body)).envelope == envelope
    assert from_problem(problem.body).envelope == envelope


def test_problem_statuses_fit_the_codes() -> None:
    statuses = {code: HTTP_STATUS[code][0] for code in Code}
    assert statuses[Code.INPUT_INVALID] == 422
    assert statuses[Code.AUTH_REQUIRED] == 401
    assert statuses[Code.ACCESS_DENIED] == 403
    assert statuses[Code.RATE_LIMITED] == 429
    assert statuses[Code.IN_PROGRESS] == 409
    assert all(400 <= status < 600 for status in statuses.values())
    retry_now = CODES.envelope(Code.RATE_LIMITED, "slow down", retry_after_ms=0)
    assert to_problem(retry_now).headers["Retry-After"] == "0"


@pytest.mark.parametrize(
    "body",
    [
        b"<html><body>502 Bad Gateway</body></html>",
        '{"type": "about:blank", "title": "Not Found", "status": 404}',
        '{"type": "about:blank", "status": 500',
        [1, 2, 3],
        {
            "status": 422,
            "code": "INPUT_INVALID",
            "message": "m",
            "retryable": True,
            "next_action": "correct_input",
            "side_effects": "none",
        },
    ],
    ids=["html", "plain-problem", "truncated", "array", "contradicts-verdict"],
)
def test_problem_without_a_valid_envelope_fails_closed(body: object) -> None:
    classification = from_problem(body)
    assert classification.envelope.code == Code.UNKNOWN_ERROR
    assert classification.envelope.retryable is False
    assert classification.evidence["raw"]["excerpt"]


@pytest.mark.parametrize("envelope", ALL, ids=lambda e: e.code)
def test_webmcp_round_trip(envelope: ErrorEnvelope) -> None:
    rendered = to_webmcp(envelope)
    assert rendered["code"] == WEBMCP_CODES[envelope.code]
    assert rendered["message"] == envelope.message
    assert from_webmcp(json.loads(json.dumps(rendered))).envelope == envelope


def test_webmcp_codes_are_the_seven() -> None:
    assert {c.value for c in WebMcpCode} == {
        "cancelled", "interrupted", "timeout", "unavailable", "invalid_input", "needs_user",
        "failed",
    }  # fmt: skip
    assert WEBMCP_CODES[Code.INPUT_INVALID] is WebMcpCode.INVALID_INPUT
    assert WEBMCP_CODES[Code.AUTH_REQUIRED] is WebMcpCode.NEEDS_USER
    assert WEBMCP_CODES[Code.TEMP_UNAVAILABLE] is WebMcpCode.UNAVAILABLE
    assert WEBMCP_CODES[Code.OUTCOME_UNKNOWN] is WebMcpCode.INTERRUPTED


@pytest.mark.parametrize(
    ("bare", "code"),
    [
        ("cancelled", Code.OUTCOME_UNKNOWN),
        ("interrupted", Code.OUTCOME_UNKNOWN),
        ("timeout", Code.OUTCOME_UNKNOWN),
        ("unavailable", Code.TEMP_UNAVAILABLE),
        ("invalid_input", Code.INPUT_INVALID),
        ("needs_user", Code.AUTH_REQUIRED),
        ("failed", Code.UNKNOWN_ERROR),
    ],
)
def test_bare_webmcp_codes_read_cautiously(bare: str, code: Code) -> None:
    envelope = from_webmcp({"code": bare, "message": "from a browser tool"}).envelope
    assert envelope.code == code
    assert envelope.message == "from a browser tool"


@pytest.mark.parametrize(
    "error",
    [{"code": "exploded"}, {"code": ["timeout"]}, "timeout", {"details": {"code": "NOPE"}}],
    ids=["unknown", "wrong-type", "not-an-object", "bad-details"],
)
def test_webmcp_without_a_valid_code_fails_closed(error: object) -> None:
    assert from_webmcp(error).envelope.code == Code.UNKNOWN_ERROR


def test_user_codes_render_by_their_next_action() -> None:
    codes = CodeRegistry()
    codes.register(
        "OUT_OF_STOCK",
        Verdict(SideEffects.NONE, False, NextAction.CORRECT_INPUT, Disposition.NEEDS_INPUT),
    )
    envelope = codes.envelope("OUT_OF_STOCK", "sku A1 is sold out", field="sku")
    assert to_problem(envelope).status == 422
    assert to_problem(envelope).body["title"] == "Out of stock"
    assert to_webmcp(envelope)["code"] == "invalid_input"
    assert from_problem(to_problem(envelope).body, codes).envelope == envelope
    assert from_webmcp(to_webmcp(envelope), codes).envelope == envelope
    assert from_call_tool_result(to_call_tool_result(envelope), codes).envelope == envelope
    # A registry that never heard of the code does not trust it.
    assert from_problem(to_problem(envelope).body).envelope.code == Code.UNKNOWN_ERROR


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(data=json_values, text=st.text(max_size=200) | st.binary(max_size=200))
def test_readers_never_raise_on_anything(data: Any, text: str | bytes) -> None:
    for read in (from_problem, from_webmcp):
        assert read(data).envelope.code in CODES
    assert from_problem(text).envelope.code in CODES
    structured = CallToolResult(content=[], structured_content={"error": data}, is_error=True)
    assert from_call_tool_result(structured).envelope.code in CODES
    as_text = text if isinstance(text, str) else text.decode("utf-8", "replace")
    textual = CallToolResult(content=[TextContent(type="text", text=as_text)], is_error=True)
    assert from_call_tool_result(textual).envelope.code in CODES
