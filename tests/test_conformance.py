"""The published conformance vectors: current, complete, and what our own readers and renderers
do with every one of them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from writesafe.reconciler import (
    CODES,
    Classification,
    Code,
    ErrorEnvelope,
    Untrusted,
    from_call_tool_result,
    from_problem,
    from_webmcp,
    from_webmcp_text,
    read_envelope,
    to_call_tool_result,
    to_problem,
    to_webmcp,
    to_webmcp_text,
)
from writesafe.reconciler._vectors import vectors

VECTORS_FILE = Path(__file__).parent.parent / "docs" / "schema" / "writesafe.error.1.vectors.json"
DOCUMENT: dict[str, Any] = json.loads(VECTORS_FILE.read_text())

READERS: dict[str, Callable[[Any], Classification]] = {
    "envelope": read_envelope,
    "mcp": from_call_tool_result,
    "problem": from_problem,
    "webmcp": from_webmcp,
    "webmcp_text": from_webmcp_text,
}


def test_the_committed_vectors_are_current() -> None:
    assert json.loads(json.dumps(vectors())) == DOCUMENT, (
        "docs/schema/writesafe.error.1.vectors.json is stale: regenerate it with "
        "`writesafe contract vectors > docs/schema/writesafe.error.1.vectors.json`"
    )


def test_every_code_rendering_and_reason_is_covered() -> None:
    assert set(DOCUMENT["verdicts"]) == {code.value for code in Code}
    rendered = {r["envelope"]["code"] for r in DOCUMENT["renderings"]}
    assert rendered == {code.value for code in Code}
    for rendering in DOCUMENT["renderings"]:
        assert set(rendering) == {"envelope", *READERS}
    covered = {v["cause"] for v in DOCUMENT["fail_closed"]}
    assert covered | set(DOCUMENT["fail_closed_inside_producers"]) == {r.value for r in Untrusted}
    assert {v["rendering"] for v in DOCUMENT["fail_closed"]} == set(READERS)


@pytest.mark.parametrize("rendering", DOCUMENT["renderings"], ids=lambda r: r["envelope"]["code"])
def test_renderings_are_emitted_and_read_back(rendering: dict[str, Any]) -> None:
    envelope = ErrorEnvelope.model_validate(rendering["envelope"])
    mcp = to_call_tool_result(envelope).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert mcp == rendering["mcp"]
    problem = to_problem(envelope)
    assert [problem.status, problem.headers, problem.body] == list(rendering["problem"].values())
    assert to_webmcp(envelope) == rendering["webmcp"]
    assert to_webmcp_text(envelope) == rendering["webmcp_text"]
    for name in ("mcp", "webmcp"):
        assert READERS[name](rendering[name]).envelope == envelope
    assert from_problem(rendering["problem"]["body"]).envelope == envelope
    assert read_envelope(rendering["envelope"]).envelope == envelope
    verdict = DOCUMENT["verdicts"][envelope.code]
    assert envelope.retryable is verdict["retryable"]
    assert envelope.next_action.value == verdict["next_action"]
    assert (envelope.field is not None) is verdict["names_field"]


def _input(data: Any) -> Any:
    if isinstance(data, dict) and "$padded" in data:
        text: str = data["$padded"]
        return text + " " * (data["bytes"] - len(text.encode()))
    return data


@pytest.mark.parametrize("vector", DOCUMENT["fail_closed"], ids=lambda v: v["case"])
def test_fail_closed_vectors_stop_with_their_cause(vector: dict[str, Any]) -> None:
    envelope = READERS[vector["rendering"]](_input(vector["input"])).envelope
    assert envelope.code == Code.UNKNOWN_ERROR
    assert envelope.cause == vector["cause"]
    assert envelope.retryable is False
    assert envelope.field is None
    assert envelope.side_effects.value == "unknown"
    assert CODES.verdict(envelope.code).retryable is False
