"""One envelope, three renderings: each reads back to the same envelope, and fails closed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types import CallToolResult, TextContent

from writesafe.reconciler import (
    CODES,
    PROBLEM_MEDIA_TYPE,
    Code,
    CodeRegistry,
    Disposition,
    ErrorEnvelope,
    Lost,
    NextAction,
    SideEffects,
    Untrusted,
    Verdict,
    WebMcpCode,
    from_call_tool_result,
    from_problem,
    from_webmcp,
    from_webmcp_text,
    to_call_tool_result,
    to_problem,
    to_webmcp,
    to_webmcp_text,
)
from writesafe.reconciler._problem import HTTP_STATUS
from writesafe.reconciler._vectors import emitted
from writesafe.reconciler._webmcp import WEBMCP_CODES

ALL = [e for e in emitted() if e.cause is None]  # OUTCOME_UNKNOWN's causes: tested below


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
        CallToolResult(
            content=[TextContent(type="text", text="{}")],
            structured_content={"error": {"code": "X"}},
            is_error=True,
        ),
    ],
    ids=["prose", "empty", "not-an-error", "invalid-envelope"],
)
def test_mcp_without_a_valid_envelope_fails_closed(result: CallToolResult) -> None:
    classification = from_call_tool_result(result)
    assert classification.envelope.code == Code.UNKNOWN_ERROR
    assert classification.envelope.side_effects is SideEffects.UNKNOWN
    assert "raw" in classification.evidence


INVALID = CODES.envelope(Code.INPUT_INVALID, "postcode is not served", field="postcode")


def mcp_wire(envelope: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """An error result as JSON, as a client without the SDK receives it."""
    wire = to_call_tool_result(CODES.envelope(Code.ACCESS_DENIED, "no")).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    text = json.dumps(envelope)
    return {**wire, "structuredContent": {"error": envelope}, "content": [
        {"type": "text", "text": text}
    ], **changes}  # fmt: skip


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        (mcp_wire(INVALID.to_json_dict(), resultType="input_required"), Untrusted.NOT_COMPLETE),
        (mcp_wire(INVALID.to_json_dict(), resultType="task"), Untrusted.NOT_COMPLETE),
        (mcp_wire({**INVALID.to_json_dict(), "field": None}), Untrusted.FIELD_MISSING),
        (
            mcp_wire({**CODES.envelope(Code.ACCESS_DENIED, "no").to_json_dict(), "field": "pc"}),
            Untrusted.FIELD_UNEXPECTED,
        ),
        (
            mcp_wire({**CODES.envelope(Code.AUTH_REQUIRED, "no").to_json_dict(), "field": "pc"}),
            Untrusted.FIELD_UNEXPECTED,
        ),
        (
            mcp_wire({**CODES.envelope(Code.UNKNOWN_ERROR, "?").to_json_dict(), "field": "pc"}),
            Untrusted.FIELD_UNEXPECTED,
        ),
        (
            {
                **mcp_wire(INVALID.to_json_dict()),
                "content": [
                    {"type": "text", "text": json.dumps({**INVALID.to_json_dict(), "field": "sku"})}
                ],
            },
            Untrusted.COPIES_DISAGREE,
        ),
        (
            {**mcp_wire(INVALID.to_json_dict()), "content": [{"type": "text", "text": "oops"}]},
            Untrusted.COPIES_DISAGREE,
        ),
        (mcp_wire(INVALID.to_json_dict(), content=[]), Untrusted.EMPTY_CONTENT),
        (
            mcp_wire({**INVALID.to_json_dict(), "retry_after_ms": 10**12}),
            Untrusted.DELAY_OUT_OF_RANGE,
        ),
        (
            mcp_wire(
                {**CODES.envelope(Code.UNKNOWN_ERROR, "?").to_json_dict(), "side_effects": "none"}
            ),
            Untrusted.UNPROVEN_NO_EFFECT,
        ),
        (mcp_wire(INVALID.to_json_dict(), isError=False), Untrusted.NOT_AN_ERROR),
        ({"isError": True}, Untrusted.NO_ENVELOPE),
        (mcp_wire({**INVALID.to_json_dict(), "retryable": True}), Untrusted.VERDICT_CONTRADICTED),
        (mcp_wire({**INVALID.to_json_dict(), "code": "NOPE"}), Untrusted.UNREGISTERED_CODE),
    ],
    ids=[
        "input-required",
        "task",
        "field-missing",
        "denied-with-field",
        "auth-with-field",
        "unknown-with-field",
        "copies-disagree",
        "text-not-envelope",
        "empty-content",
        "absurd-delay",
        "foreign-no-effect",
        "not-an-error",
        "no-content",
        "retryable-invalid",
        "unregistered",
    ],
)
def test_mcp_reader_fails_closed_on_meaning_with_its_reason(
    wire: dict[str, Any], reason: Untrusted
) -> None:
    """The wire form (a plain dict) and the SDK's model fail closed alike, for the same reason."""
    for result in (wire, _model(wire)):
        if result is None:
            continue
        found = from_call_tool_result(result)
        assert found.envelope.code == Code.UNKNOWN_ERROR
        assert found.envelope.side_effects is SideEffects.UNKNOWN
        assert found.envelope.field is None
        assert found.envelope.cause == reason
        assert found.evidence["untrusted"] == reason
        assert found.evidence["raw"]["excerpt"]


def _model(wire: dict[str, Any]) -> CallToolResult | None:
    try:
        return CallToolResult.model_validate(wire)
    except ValueError:
        return None


def test_mcp_reader_accepts_the_wire_form() -> None:
    wire = to_call_tool_result(INVALID).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert from_call_tool_result(wire).envelope == INVALID
    assert from_call_tool_result(json.loads(json.dumps(wire))).envelope == INVALID


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
    ("bare", "code", "cause"),
    [
        ("cancelled", Code.OUTCOME_UNKNOWN, "cancelled"),
        ("interrupted", Code.OUTCOME_UNKNOWN, "interrupted"),
        ("timeout", Code.OUTCOME_UNKNOWN, "timeout"),
        ("unavailable", Code.UNKNOWN_ERROR, "tool_unavailable"),  # no such tool: not retryable
        ("invalid_input", Code.UNKNOWN_ERROR, "field_missing"),  # names nothing to correct
        ("needs_user", Code.AUTH_REQUIRED, None),
        ("failed", Code.UNKNOWN_ERROR, "bare_failure"),
    ],
)
def test_bare_webmcp_codes_read_cautiously(bare: str, code: Code, cause: str | None) -> None:
    for found in (
        from_webmcp({"code": bare, "message": "from a browser tool"}),
        from_webmcp_text(f"Error [{bare}]: from a browser tool"),
    ):
        envelope = found.envelope
        assert (envelope.code, envelope.cause) == (code, cause)
        assert envelope.retryable is False
        assert envelope.message == "from a browser tool"


@pytest.mark.parametrize(
    ("cause", "webmcp"),
    [(Lost.TIMEOUT, "timeout"), (Lost.CANCELLED, "cancelled"), (Lost.INTERRUPTED, "interrupted"),
     (None, "interrupted")],
)  # fmt: skip
def test_outcome_unknown_renders_by_how_it_was_lost(cause: Lost | None, webmcp: str) -> None:
    envelope = CODES.envelope(Code.OUTCOME_UNKNOWN, "no answer", cause=cause)
    assert to_webmcp(envelope)["code"] == webmcp
    assert to_webmcp_text(envelope) == f"Error [{webmcp}]: no answer"
    assert from_webmcp(to_webmcp(envelope)).envelope == envelope
    assert from_webmcp_text(to_webmcp_text(envelope)).envelope.cause == (cause or "interrupted")


@pytest.mark.parametrize("envelope", ALL, ids=lambda e: e.code)
def test_webmcp_text_form(envelope: ErrorEnvelope) -> None:
    text = to_webmcp_text(envelope)
    assert text == f"Error [{WEBMCP_CODES[envelope.code].value}]: {envelope.message}"
    read = from_webmcp_text(text).envelope
    assert read.retryable is False  # a bare code is never retried automatically


@pytest.mark.parametrize("text", ["it broke", "Error [exploded]: no", "Error [timeout] no"])
def test_webmcp_text_that_is_not_the_form_fails_closed(text: str) -> None:
    assert from_webmcp_text(text).envelope.cause == Untrusted.NOT_WEBMCP


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
