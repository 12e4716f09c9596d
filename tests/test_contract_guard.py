"""The contract inside the guard: adapters' envelopes and evidence reach the ledger, stated delays
are honoured on the simulated clock, and one budget covers retries and continuations."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import MakeWriteSafe
from writesafe import ToolError, WriteSafe, WriteSafeError
from writesafe.ledger import AttemptKind, ManualClock
from writesafe.reconciler import (
    CODES,
    Classification,
    Code,
    CodeRegistry,
    DownstreamError,
    ErrorEnvelope,
    ResponseAdapter,
    Rule,
    SideEffects,
    Untrusted,
)

START = datetime(2026, 1, 1, tzinfo=UTC)

ADAPTER = ResponseAdapter(
    name="shop",
    version="7",
    rules=(
        Rule(Code.INPUT_INVALID, status=422, body={"code": "BAD_SKU"}, field_from="field"),
        Rule(Code.TEMP_UNAVAILABLE, status=503, retry_after_ms=100),
    ),
    fields={"item.sku": "sku"},
)


def executions(status: Any) -> list[Any]:
    return [a for a in status.attempts if a.kind is AttemptKind.EXECUTION]


async def test_stated_delay_is_honoured_and_evidence_is_kept(make_ws: MakeWriteSafe) -> None:
    clock = ManualClock(START)
    ws = make_ws(clock=clock)
    answers = [
        DownstreamError(503, "busy", headers={"Retry-After": "7", "Set-Cookie": "s=secret"}),
        DownstreamError(
            503,
            "busy",
            headers={
                "Retry-After": "Thu, 01 Jan 2026 00:00:22 GMT",
                "Date": "Thu, 01 Jan 2026 00:00:20 GMT",  # the server's clock: wait 2 s
            },
        ),
    ]

    @ws.tool("order", adapter=ADAPTER)
    async def order(sku: str) -> dict[str, str]:
        if answers:
            raise answers.pop(0)
        return {"sku": sku}

    assert await order("A1", idempotency_key="k1") == {"sku": "A1"}
    status = await ws.status("k1")
    assert status is not None
    runs = executions(status)
    offsets = [(run.started_at - START).total_seconds() for run in runs]
    assert offsets == [0, 7, 9]  # 7 s as stated, then 2 s by the server's own clock
    first = runs[0]
    assert first.code == Code.TEMP_UNAVAILABLE
    assert first.error is not None
    assert first.error.retry_after_ms == 7_000
    assert first.evidence is not None
    assert first.evidence["adapter"] == "shop/7"
    assert first.evidence["status"] == 503
    assert first.evidence["headers"] == {"retry-after": "7"}
    assert first.evidence["body"] == {"excerpt": "busy", "bytes": 4, "truncated": False}


async def test_malformed_body_fails_closed_in_one_execution(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(clock=ManualClock(START))
    calls = 0

    @ws.tool("order", adapter=ADAPTER)
    async def order(sku: str) -> dict[str, str]:
        nonlocal calls
        calls += 1
        raise DownstreamError(422, b'{"code": "BAD_SKU", "fie' + b"x" * 5_000_000)

    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k2")
    envelope = raised.value.envelope
    assert (envelope.code, envelope.retryable) == (Code.UNKNOWN_ERROR, False)
    assert envelope.side_effects is SideEffects.UNKNOWN
    assert calls == 1
    status = await ws.status("k2")
    assert status is not None
    assert status.status == "outcome_unknown"
    [run] = executions(status)
    assert run.evidence is not None
    assert len(run.evidence["body"]["excerpt"]) == 2048
    assert run.evidence["body"]["bytes"] == 5_000_024
    assert run.evidence["body"]["truncated"] is True


async def test_retries_and_continuations_share_one_budget(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(clock=ManualClock(START))
    seen: list[str] = []

    @ws.tool("order", adapter=ADAPTER, max_executions=3)
    async def order(sku: str) -> dict[str, str]:
        seen.append(sku)
        if len(seen) == 1:
            raise DownstreamError(503)
        raise DownstreamError(422, json={"code": "BAD_SKU", "field": "item.sku"})

    # Execution 1 is unavailable, execution 2 (an automatic retry) rejects the sku.
    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k3")
    assert (raised.value.envelope.code, raised.value.envelope.field) == ("INPUT_INVALID", "sku")
    assert raised.value.envelope.operation is not None
    assert raised.value.envelope.operation.attempts_left == 1
    # A corrected sku continues: execution 3, the last of the budget.
    with pytest.raises(WriteSafeError):
        await order("A2", idempotency_key="k3")
    # Another correction finds no budget left: the stored failure, nothing executed.
    with pytest.raises(WriteSafeError) as raised:
        await order("A3", idempotency_key="k3")
    assert raised.value.envelope.code == Code.INPUT_INVALID
    assert seen == ["A1", "A1", "A2"]
    status = await ws.status("k3")
    assert status is not None
    assert (status.executions, status.attempts_left) == (3, 0)


class LyingAdapter:
    """A custom adapter whose envelopes disagree with their codes' verdicts."""

    name, version = "lying", "1"

    def __init__(self, envelope: ErrorEnvelope) -> None:
        self.envelope = envelope

    def classify(self, error: BaseException, codes: CodeRegistry) -> Classification:
        return Classification(self.envelope, {"said": "so"})


INVALID = CODES.envelope(Code.INPUT_INVALID, "postcode is not served", field="postcode")


@pytest.mark.parametrize(
    ("envelope", "reason"),
    [
        (INVALID.model_copy(update={"retryable": True}), Untrusted.VERDICT_CONTRADICTED),
        (INVALID.model_copy(update={"field": None}), Untrusted.FIELD_MISSING),
        (
            CODES.envelope(Code.ACCESS_DENIED, "no").model_copy(update={"field": "postcode"}),
            Untrusted.FIELD_UNEXPECTED,
        ),
        (
            CODES.envelope(Code.TEMP_UNAVAILABLE, "later", retry_after_ms=10**12),
            Untrusted.DELAY_OUT_OF_RANGE,
        ),
    ],
    ids=["retryable-invalid", "invalid-without-field", "denied-with-field", "absurd-delay"],
)
async def test_an_envelope_that_disagrees_with_its_verdict_fails_closed(
    make_ws: MakeWriteSafe, envelope: ErrorEnvelope, reason: Untrusted
) -> None:
    ws = make_ws(clock=ManualClock(START))
    calls = 0

    @ws.tool("order", adapter=LyingAdapter(envelope))
    async def order(sku: str) -> dict[str, str]:
        nonlocal calls
        calls += 1
        raise RuntimeError("downstream said no")

    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k-lie")
    failed = raised.value.envelope
    assert (failed.code, failed.cause, failed.retryable) == ("UNKNOWN_ERROR", reason, False)
    assert failed.side_effects is SideEffects.UNKNOWN
    assert calls == 1  # never retried
    status = await ws.status("k-lie")
    assert status is not None
    [run] = executions(status)
    assert run.evidence is not None
    assert run.evidence["envelope"] == envelope.to_json_dict()  # what the adapter said, kept
    assert run.evidence["said"] == "so"
    assert run.evidence["untrusted"] == reason


async def test_a_tool_error_that_disagrees_with_its_verdict_fails_closed(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws(clock=ManualClock(START))

    @ws.tool("order")
    async def order(sku: str) -> dict[str, str]:
        raise ToolError("AUTH_REQUIRED", "log in", field="postcode")

    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k-te")
    assert (raised.value.envelope.code, raised.value.envelope.cause) == (
        "UNKNOWN_ERROR",
        "field_unexpected",
    )


async def test_a_rule_naming_an_unregistered_code_carries_no_field(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(clock=ManualClock(START))
    adapter = ResponseAdapter(
        name="typo", version="1", rules=(Rule("INPUT_INVALIDD", status=422, field="postcode"),)
    )

    @ws.tool("order", adapter=adapter)
    async def order(sku: str) -> dict[str, str]:
        raise DownstreamError(422)

    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k-typo")
    envelope = raised.value.envelope
    assert (envelope.code, envelope.field, envelope.cause) == (
        "UNKNOWN_ERROR",
        None,
        "unregistered_code",
    )


async def test_retry_exhausted_names_the_code_that_exhausted_it(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(clock=ManualClock(START))

    @ws.tool("order", adapter=ADAPTER, max_executions=2)
    async def order(sku: str) -> dict[str, str]:
        raise DownstreamError(503)

    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k-ex")
    envelope = raised.value.envelope
    assert (envelope.code, envelope.cause) == ("RETRY_EXHAUSTED", "TEMP_UNAVAILABLE")


async def test_a_throttled_retryable_failure_says_when_to_come_back(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws(clock=ManualClock(START))
    busy = ResponseAdapter(
        name="busy", version="1", rules=(Rule(Code.DEPENDENCY_BUSY, status=409),)
    )

    @ws.tool("order", adapter=busy, max_executions=10)
    async def order(sku: str) -> dict[str, str]:
        raise DownstreamError(409)  # no Retry-After, and the rule states no delay

    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k-busy")
    envelope = raised.value.envelope
    assert envelope.code == "DEPENDENCY_BUSY"
    assert envelope.operation is not None
    assert envelope.operation.throttled
    assert envelope.retry_after_ms is not None
    assert envelope.retry_after_ms > 0
    status = await ws.status("k-busy")
    assert status is not None
    assert status.error is not None
    assert status.error.retry_after_ms == envelope.retry_after_ms  # the continuation waits too


async def test_in_progress_names_the_operation_of_a_derived_key(make_ws: MakeWriteSafe) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    ws = make_ws(wait_timeout=0.05)

    @ws.tool("slow")
    async def slow(sku: str) -> str:
        started.set()
        await release.wait()
        return sku

    running = asyncio.create_task(slow.invoke((), {"sku": "A1"}, key=None, key_from_arguments=True))
    await started.wait()
    with pytest.raises(WriteSafeError) as waiting:
        await slow.invoke((), {"sku": "A1"}, key=None, key_from_arguments=True)
    release.set()
    invocation = await running
    envelope = waiting.value.envelope
    assert envelope.code == "IN_PROGRESS"
    assert envelope.operation is not None
    assert envelope.operation.key == invocation.key
    assert envelope.operation.key.startswith("call:")
    assert envelope.operation.status == "in_flight"


ANSWERS = ResponseAdapter(
    name="shop-answers",
    version="1",
    answer_rules=(
        Rule(Code.DEPENDENCY_BUSY, body={"ok": False, "reason": "LOCKED"}, retry_after_ms=100),
        Rule(Code.INPUT_INVALID, body={"ok": False, "reason": "BAD_SKU"}, field_from="field"),
    ),
)


async def test_a_success_shaped_failure_is_that_failure(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(clock=ManualClock(START))

    @ws.tool("order", adapter=ANSWERS)
    async def order(sku: str) -> dict[str, Any]:
        return {"ok": False, "reason": "BAD_SKU", "field": "sku"}  # a 200 that says it failed

    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k-200")
    assert (raised.value.envelope.code, raised.value.envelope.field) == ("INPUT_INVALID", "sku")
    status = await ws.status("k-200")
    assert status is not None
    assert status.status == "failed"
    assert status.result is None
    [run] = executions(status)
    assert run.evidence is not None
    assert run.evidence["status"] == 200


async def test_a_success_shaped_busy_answer_is_retried(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(clock=ManualClock(START))
    answers = [{"ok": False, "reason": "LOCKED"}, {"ok": True, "order": "o-1"}]

    @ws.tool("order", adapter=ANSWERS)
    async def order(sku: str) -> dict[str, Any]:
        return answers.pop(0)

    assert await order("A1", idempotency_key="k-locked") == {"ok": True, "order": "o-1"}
    status = await ws.status("k-locked")
    assert status is not None
    assert [run.code for run in executions(status)] == ["DEPENDENCY_BUSY", None]


async def test_a_delay_stated_in_the_body_is_honoured(make_ws: MakeWriteSafe) -> None:
    clock = ManualClock(START)
    ws = make_ws(clock=clock)
    adapter = ResponseAdapter(
        name="json-delay",
        version="1",
        rules=(Rule(Code.RATE_LIMITED, status=429, retry_after_ms_from="retry_after_ms"),),
    )
    answers = [DownstreamError(429, json={"retry_after_ms": 2_500})]

    @ws.tool("order", adapter=adapter)
    async def order(sku: str) -> dict[str, str]:
        if answers:
            raise answers.pop(0)
        return {"sku": sku}

    assert await order("A1", idempotency_key="k-delay") == {"sku": "A1"}
    status = await ws.status("k-delay")
    assert status is not None
    runs = executions(status)
    assert runs[0].error is not None
    assert runs[0].error.retry_after_ms == 2_500
    assert [(run.started_at - START).total_seconds() for run in runs] == [0, 2.5]


async def test_an_unknown_outcome_says_when_a_lookup_can_settle_it(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(clock=ManualClock(START))

    async def find(op: Any) -> Any:
        raise AssertionError("not asked within this test")

    @ws.tool("order", lookup=find, settle_after=4.0)
    async def order(sku: str) -> dict[str, str]:
        raise ConnectionResetError  # sent, then lost

    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k-lost")
    envelope = raised.value.envelope
    assert (envelope.code, envelope.cause, envelope.retry_after_ms) == (
        "OUTCOME_UNKNOWN",
        "interrupted",
        4_000,
    )


async def test_an_unreachable_ledger_is_named_as_the_dependency_at_fault(tmp_path: Any) -> None:
    ws = WriteSafe(database_url="postgresql+asyncpg://postgres@127.0.0.1:1/none")

    @ws.tool("order")
    async def order(sku: str) -> dict[str, str]:
        raise AssertionError("never runs")

    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k-ledger")
    envelope = raised.value.envelope
    assert (envelope.code, envelope.cause, envelope.side_effects) == (
        "TEMP_UNAVAILABLE",
        "ledger_unreachable",
        SideEffects.NONE,
    )
    await ws.close()
