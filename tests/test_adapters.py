"""Rule-based adapters: ordered rules, field translation, Retry-After, bounded evidence, and a
fail-closed default that no downstream body can break."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from writesafe.ledger import ManualClock, dumps_json
from writesafe.reconciler import (
    CODES,
    DEFAULT_ADAPTER,
    Adapter,
    Code,
    DownstreamError,
    RawResponse,
    ResponseAdapter,
    Rule,
    SideEffects,
    ToolError,
    to_problem,
)
from writesafe.reconciler._retry_after import MAX_RETRY_AFTER_MS, parse_retry_after

NOW = datetime(2026, 1, 1, tzinfo=UTC)

ORDERS = ResponseAdapter(
    name="orders",
    version="2",
    rules=(
        Rule(Code.INPUT_INVALID, status=422, body={"code": "POSTCODE_INVALID"}, field="postcode"),
        Rule(
            Code.INPUT_INVALID,
            status=409,
            body={"reason": "INVALID_POSTCODE"},
            field_from="field",
            name="invalid-postcode-409",
        ),
        Rule(Code.DEPENDENCY_BUSY, status=409, retry_after_ms=250),
        Rule(Code.AUTH_REQUIRED, status=401),
        Rule(Code.RATE_LIMITED, status=429, retry_after_ms=1_000),
    ),
    fields={"shipping.postcode": "postcode"},
    clock=ManualClock(NOW),
)


def classify(adapter: Adapter, error: BaseException) -> Any:
    return adapter.classify(error, CODES)


def test_exact_rule_wins_over_the_broad_branch_and_translates_the_field() -> None:
    error = DownstreamError(409, json={"reason": "INVALID_POSTCODE", "field": "shipping.postcode"})
    found = classify(ORDERS, error)
    assert found.envelope.code == Code.INPUT_INVALID
    assert found.envelope.field == "postcode"
    assert found.envelope.retryable is False
    assert found.evidence["rule"] == "invalid-postcode-409"


def test_broad_branch_catches_the_rest_of_its_status() -> None:
    found = classify(ORDERS, DownstreamError(409, json={"reason": "LOCKED"}))
    assert found.envelope.code == Code.DEPENDENCY_BUSY
    assert found.envelope.retry_after_ms == 250
    assert found.envelope.side_effects is SideEffects.NONE


def test_untranslated_field_passes_through_and_non_string_fields_are_dropped() -> None:
    plain = DownstreamError(409, json={"reason": "INVALID_POSTCODE", "field": "zip"})
    assert classify(ORDERS, plain).envelope.field == "zip"
    wrong = DownstreamError(409, json={"reason": "INVALID_POSTCODE", "field": ["postcode"]})
    assert classify(ORDERS, wrong).envelope.field is None


def test_a_rule_behind_a_broader_one_is_refused() -> None:
    with pytest.raises(ValueError, match="can never match"):
        ResponseAdapter(
            name="bad",
            version="1",
            rules=(
                Rule(Code.DEPENDENCY_BUSY, status=409),
                Rule(Code.INPUT_INVALID, status=409, body={"reason": "INVALID_POSTCODE"}),
            ),
        )
    with pytest.raises(ValueError, match="can never match"):
        ResponseAdapter(
            name="bad",
            version="1",
            rules=(Rule(Code.DEPENDENCY_BUSY), Rule(Code.AUTH_REQUIRED, status=401)),
        )
    # Disjoint statuses and narrower-after-broader-body are fine.
    ResponseAdapter(
        name="ok",
        version="1",
        rules=(
            Rule(Code.DEPENDENCY_BUSY, status=409, body={"reason": "LOCKED"}),
            Rule(Code.INPUT_INVALID, status=409),
            Rule(Code.AUTH_REQUIRED, status=(401, 407)),
        ),
    )


def test_body_predicates_compare_json_exactly() -> None:
    adapter = ResponseAdapter(
        name="t",
        version="1",
        rules=(Rule(Code.DEPENDENCY_BUSY, body={"error.busy": True, "error.items.1": "b"}),),
    )
    busy = {"error": {"busy": True, "items": ["a", "b"]}}
    assert classify(adapter, DownstreamError(500, json=busy)).envelope.code == "DEPENDENCY_BUSY"
    for different in (
        {"error": {"busy": 1, "items": ["a", "b"]}},
        {"error": {"busy": "true", "items": ["a", "b"]}},
        {"error": {"busy": True, "items": ["a"]}},
        {"error": True},
    ):
        found = classify(adapter, DownstreamError(500, json=different))
        assert found.envelope.code == Code.UNKNOWN_ERROR, different


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "3"}, 3_000),
        ({"Retry-After": "0"}, 0),
        ({"Retry-After": "86400"}, MAX_RETRY_AFTER_MS),
        ({"Retry-After": "Thu, 01 Jan 2026 00:00:07 GMT"}, 7_000),
        (  # measured against the server's own Date header, not our clock
            {
                "Retry-After": "Thu, 01 Jan 2026 00:01:00 GMT",
                "Date": "Thu, 01 Jan 2026 00:00:58 GMT",
            },
            2_000,
        ),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0),
        ({"Retry-After": "soon"}, 1_000),  # unparseable: the rule's default
        ({"Retry-After": "-1"}, 1_000),
        ({}, 1_000),
    ],
)
def test_retry_after_is_parsed_and_clamped(headers: dict[str, str], expected: int) -> None:
    found = classify(ORDERS, DownstreamError(429, json={}, headers=headers))
    assert found.envelope.code == Code.RATE_LIMITED
    assert found.envelope.retry_after_ms == expected


def test_retry_after_parser_edges() -> None:
    assert parse_retry_after("9" * 5000, now=NOW) == MAX_RETRY_AFTER_MS
    assert parse_retry_after("1.5", now=NOW) is None
    assert parse_retry_after("\u0663", now=NOW) is None  # a non-ASCII digit
    assert parse_retry_after("120", now=NOW, maximum_ms=60_000) == 60_000


def test_evidence_is_bounded_and_keeps_no_credentials() -> None:
    body = "x" * 100_000
    headers = {
        "Content-Type": "text/plain",
        "Set-Cookie": "session=secret",
        "Authorization": "Bearer secret",
        "X-Request-Id": "r-1",
    }
    found = classify(ORDERS, DownstreamError(500, body, headers=headers))
    evidence = found.evidence
    assert evidence["status"] == 500
    assert evidence["adapter"] == "orders/2"
    assert evidence["headers"] == {"content-type": "text/plain", "x-request-id": "r-1"}
    assert len(evidence["body"]["excerpt"]) == 2048
    assert evidence["body"]["bytes"] == 100_000
    assert evidence["body"]["truncated"] is True
    assert "secret" not in dumps_json(evidence)


async def test_httpx_status_errors_carry_their_response() -> None:
    def backend(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            409, json={"reason": "INVALID_POSTCODE", "field": "shipping.postcode"}
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(backend)) as client:
        response = await client.post("https://shop.test/orders", json={})
        with pytest.raises(httpx.HTTPStatusError) as raised:
            response.raise_for_status()
    found = classify(ORDERS, raised.value)
    assert found.envelope.code == Code.INPUT_INVALID
    assert found.envelope.field == "postcode"
    assert found.evidence["status"] == 409


def test_a_streamed_body_that_was_never_read_is_not_awaited() -> None:
    response = httpx.Response(503, stream=httpx.ByteStream(b"later"))
    assert RawResponse.from_httpx(response).body == b""


@pytest.mark.parametrize(
    ("error", "code", "side_effects"),
    [
        (httpx.ConnectError("refused"), Code.TEMP_UNAVAILABLE, SideEffects.NONE),
        (httpx.PoolTimeout("pool"), Code.TEMP_UNAVAILABLE, SideEffects.NONE),
        (httpx.ReadTimeout("late"), Code.OUTCOME_UNKNOWN, SideEffects.UNKNOWN),
        (httpx.RemoteProtocolError("cut"), Code.OUTCOME_UNKNOWN, SideEffects.UNKNOWN),
        (TimeoutError(), Code.OUTCOME_UNKNOWN, SideEffects.UNKNOWN),
        (ToolError(Code.ACCESS_DENIED, "no"), Code.ACCESS_DENIED, SideEffects.NONE),
        (ValueError("bug"), Code.UNKNOWN_ERROR, SideEffects.UNKNOWN),
    ],
)
def test_exceptions_without_a_response_use_the_exception_classification(
    error: BaseException, code: Code, side_effects: SideEffects
) -> None:
    for adapter in (ORDERS, DEFAULT_ADAPTER):
        envelope = classify(adapter, error).envelope
        assert (envelope.code, envelope.side_effects) == (code, side_effects)


def test_no_matching_rule_fails_closed_with_the_raw_response() -> None:
    found = classify(ORDERS, DownstreamError(400, json={"error": "unexpected"}))
    assert found.envelope.code == Code.UNKNOWN_ERROR
    assert found.envelope.side_effects is SideEffects.UNKNOWN
    assert json.loads(found.evidence["body"]["excerpt"]) == {"error": "unexpected"}
    assert "rule" not in found.evidence


def test_a_rule_may_prove_an_unknown_error_had_no_effect() -> None:
    adapter = ResponseAdapter(
        name="t",
        version="1",
        rules=(Rule(Code.UNKNOWN_ERROR, status=400, side_effects=SideEffects.NONE),),
    )
    envelope = classify(adapter, DownstreamError(400)).envelope
    assert (envelope.code, envelope.side_effects) == (Code.UNKNOWN_ERROR, SideEffects.NONE)
    # …but cannot make any other code look safer than its verdict.
    widened = ResponseAdapter(
        name="t",
        version="1",
        rules=(Rule(Code.OUTCOME_UNKNOWN, status=400, side_effects=SideEffects.NONE),),
    )
    assert classify(widened, DownstreamError(400)).envelope.side_effects is SideEffects.UNKNOWN


def test_a_rule_naming_an_unregistered_code_fails_closed() -> None:
    adapter = ResponseAdapter(name="t", version="1", rules=(Rule("OUT_OF_STOCK", status=409),))
    envelope = classify(adapter, DownstreamError(409)).envelope
    assert envelope.code == Code.UNKNOWN_ERROR
    assert "OUT_OF_STOCK" in envelope.message


def test_a_broken_predicate_fails_closed_instead_of_falling_through() -> None:
    def explodes(response: RawResponse, body: Any) -> bool:
        raise KeyError("boom")

    adapter = ResponseAdapter(
        name="t",
        version="1",
        rules=(
            Rule(Code.INPUT_INVALID, status=409, when=explodes),
            Rule(Code.DEPENDENCY_BUSY, status=409),
        ),
    )
    found = classify(adapter, DownstreamError(409, json={}))
    assert found.envelope.code == Code.UNKNOWN_ERROR
    assert found.evidence["rule_error"]["exception"] == "builtins.KeyError"


def test_downstream_envelopes_are_read_and_checked_before_any_rule() -> None:
    envelope = CODES.envelope(Code.INPUT_INVALID, "bad sku", field="sku", retry_after_ms=None)
    problem = to_problem(envelope)
    found = classify(ORDERS, DownstreamError(409, json=problem.body))
    assert found.envelope == envelope
    # Envelope-shaped but contradicting its verdict: UNKNOWN_ERROR, not "every 409 is busy".
    lying = {**envelope.to_json_dict(), "code": "DEPENDENCY_BUSY"}
    found = classify(ORDERS, DownstreamError(409, json=lying))
    assert found.envelope.code == Code.UNKNOWN_ERROR
    # A downstream's delay is clamped, and its operation block is not ours.
    slow = CODES.envelope(Code.RATE_LIMITED, "slow", retry_after_ms=10**9).to_json_dict()
    slow["operation"] = {"key": "theirs", "status": "failed", "attempt": 1, "attempts_left": 0}
    found = classify(ORDERS, DownstreamError(429, json=slow))
    assert found.envelope.retry_after_ms == MAX_RETRY_AFTER_MS
    assert found.envelope.operation is None
    # Opting out leaves such bodies to the rules.
    rules_only = dataclasses.replace(ORDERS, accept_envelopes=False)
    assert classify(rules_only, DownstreamError(409, json=lying)).envelope.code == "DEPENDENCY_BUSY"


MALFORMED = {
    "truncated-json": b'{"reason": "INVALID_POSTCODE", "fie',
    "html": b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>",
    "ten-megabytes": b'{"reason": "INVALID_POSTCODE", "pad": "' + b"x" * 10_000_000 + b'"}',
    "wrong-type": b'["INVALID_POSTCODE"]',
    "wrong-field-type": b'{"reason": ["INVALID_POSTCODE"]}',
    "not-utf8": b"\xff\xfe\x00{\x80",
    "deep": b"[" * 100_000,
    "empty": b"",
    "nan": b'{"reason": NaN}',
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_bodies_fail_closed_with_a_bounded_excerpt(body: bytes) -> None:
    strict = dataclasses.replace(ORDERS, rules=tuple(rule for rule in ORDERS.rules if rule.body))
    found = classify(strict, DownstreamError(409, body))
    assert found.envelope.code == Code.UNKNOWN_ERROR
    assert found.envelope.retryable is False
    assert len(found.evidence["body"]["excerpt"]) <= 2048
    assert found.evidence["body"]["bytes"] == len(body)
    dumps_json(found.evidence)  # storable as it is


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
bodies = st.one_of(
    st.binary(max_size=4096),
    st.text(max_size=4096).map(lambda t: t.encode("utf-8", "surrogatepass")),
    json_values.map(lambda v: json.dumps(v).encode()),
    json_values.map(lambda v: json.dumps(v).encode()[:-1]),
    st.fixed_dictionaries(
        {"reason": st.sampled_from(["LOCKED", "INVALID_POSTCODE"]) | json_values},
        optional={"field": json_values, "schema": st.just("writesafe.error/1") | json_values},
    ).map(lambda v: json.dumps(v).encode()),
)
headers = st.lists(
    st.tuples(
        st.sampled_from(["Retry-After", "Date", "Content-Type", "X-Other", "retry-after"]),
        st.text(max_size=64),
    ),
    max_size=4,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(status=st.integers(min_value=100, max_value=599), body=bodies, headers=headers)
def test_fuzzed_responses_never_raise(status: int, body: bytes, headers: list[Any]) -> None:
    for adapter in (ORDERS, DEFAULT_ADAPTER):
        found = adapter.classify(DownstreamError(status, body, headers=headers), CODES)
        envelope = found.envelope
        assert envelope.code in CODES
        if envelope.retry_after_ms is not None:
            assert 0 <= envelope.retry_after_ms <= MAX_RETRY_AFTER_MS
        assert len(found.evidence["body"]["excerpt"]) <= 2048
        dumps_json(found.evidence)
    if status not in (401, 409, 422, 429):
        assert ORDERS.classify(DownstreamError(status, body), CODES).envelope.code in (
            Code.UNKNOWN_ERROR,
            *(CODES.verdicts()),  # a valid downstream envelope is read as what it says
        )


@pytest.mark.parametrize(
    ("body", "headers", "expected"),
    [
        ({"retry_after_ms": 1500}, {}, 1500),
        ({"retry_after_ms": 1500}, {"Retry-After": "2"}, 2000),  # the header wins
        ({"retry_after_ms": 10**12}, {}, MAX_RETRY_AFTER_MS),  # clamped like a header
        ({"retry_after_ms": "soon"}, {}, 300),  # not a number: the rule's fixed delay
        ({"retry_after_ms": -5}, {}, 300),
        ({"retry_after_ms": True}, {}, 300),
        ({}, {}, 300),
    ],
)
def test_a_delay_stated_in_the_body(
    body: dict[str, Any], headers: dict[str, str], expected: int
) -> None:
    adapter = ResponseAdapter(
        name="json-delay",
        version="1",
        rules=(
            Rule(
                Code.RATE_LIMITED,
                status=429,
                retry_after_ms_from="retry_after_ms",
                retry_after_ms=300,
            ),
        ),
    )
    found = classify(adapter, DownstreamError(429, json=body, headers=headers))
    assert found.envelope.retry_after_ms == expected


def test_answer_rules_judge_successful_answers_only_when_they_match() -> None:
    adapter = ResponseAdapter(
        name="answers",
        version="1",
        answer_rules=(Rule(Code.DEPENDENCY_BUSY, body={"ok": False}),),
    )
    busy = adapter.classify_answer({"ok": False}, CODES)
    assert busy is not None
    assert busy.envelope.code == Code.DEPENDENCY_BUSY
    assert adapter.classify_answer({"ok": True}, CODES) is None
    assert adapter.classify_answer(object(), CODES) is None  # nothing JSON-shaped to judge
    assert ResponseAdapter(name="plain", version="1").classify_answer({"ok": False}, CODES) is None
