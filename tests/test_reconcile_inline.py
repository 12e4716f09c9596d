"""The inline replay gate: a retry of an unknown outcome asks the lookup before anything runs."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import MakeWriteSafe
from tests.reconcile_support import (
    Shop,
    claimed_by_a_dead_worker,
    late_failure_report,
    order_tool,
    unknown_evidence,
    unknown_outcome,
)
from writesafe import Found, LookupOperation, NotFound, Status, Unknown, WriteSafeError
from writesafe.ledger import AttemptKind, ManualClock
from writesafe.reconciler import LookupResult


async def test_hit_returns_the_found_result_without_executing(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop(faults=["commit_then_timeout"])
    submit_order = order_tool(ws, shop)
    first = await unknown_outcome(submit_order("A1", idempotency_key="ord-1"))
    assert first.envelope.side_effects == "unknown"

    found = await submit_order("A1", idempotency_key="ord-1")
    again = await submit_order("A1", idempotency_key="ord-1")

    assert found == again == {"order_id": "o-1", "sku": "A1"}
    assert shop.placed == 1
    assert shop.lookups == 1  # the third call replays the stored result
    status = await ws.status("ord-1")
    assert status is not None
    assert (status.status, status.executions, status.result) == (
        Status.SUCCEEDED,
        1,
        {"order_id": "o-1", "sku": "A1"},
    )
    kinds = [(a.kind, a.outcome) for a in status.attempts]
    # The execution's outcome is what the lookup established; its envelope is still its own.
    assert kinds == [(AttemptKind.EXECUTION, "succeeded"), (AttemptKind.LOOKUP, "found")]
    assert status.attempts[0].code == "OUTCOME_UNKNOWN"
    assert status.attempts[1].actor == "caller"
    assert status.error is None  # the timeout's envelope stays with its attempt, not the operation


async def test_miss_after_the_settle_window_executes_exactly_once_more(
    make_ws: MakeWriteSafe,
) -> None:
    clock = ManualClock()
    ws, shop = make_ws(clock=clock), Shop(faults=["timeout_before_commit"])
    submit_order = order_tool(ws, shop, settle_after=5.0)
    await unknown_outcome(submit_order("A1", idempotency_key="ord-2"))
    clock.advance(5.0)

    order = await submit_order("A1", idempotency_key="ord-2")

    assert order == {"order_id": "o-1", "sku": "A1"}
    assert shop.placed == 1
    status = await ws.status("ord-2")
    assert status is not None
    assert (status.status, status.executions) == (Status.SUCCEEDED, 2)
    trail = [(a.kind, a.execution, a.outcome) for a in status.attempts]
    # The first execution is closed as the lookup proved it: no effect.
    assert trail == [
        (AttemptKind.EXECUTION, 1, "failed"),
        (AttemptKind.LOOKUP, None, "not_found"),
        (AttemptKind.EXECUTION, 2, "succeeded"),
    ]


async def test_miss_before_the_settle_window_does_not_execute(make_ws: MakeWriteSafe) -> None:
    clock = ManualClock()
    ws, shop = make_ws(clock=clock), Shop(faults=["timeout_before_commit"])
    submit_order = order_tool(ws, shop, settle_after=5.0)
    await unknown_outcome(submit_order("A1", idempotency_key="ord-3"))
    clock.advance(1.0)

    error = await unknown_outcome(submit_order("A1", idempotency_key="ord-3"))

    assert error.envelope.retry_after_ms == 4_000  # when the window closes
    assert error.envelope.next_action == "reconcile"
    assert error.envelope.cause == "settling"  # why it is still unknown, typed
    assert shop.placed == 0
    assert shop.lookups == 1
    status = await ws.status("ord-3")
    assert status is not None
    assert (status.status, status.executions) == (Status.OUTCOME_UNKNOWN, 1)
    lookup = status.attempts[-1]
    assert (lookup.kind, lookup.outcome) == (AttemptKind.LOOKUP, "unknown")
    assert lookup.evidence is not None
    assert "settle" in lookup.evidence["reason"]


async def test_a_raising_lookup_leaves_the_outcome_unknown(make_ws: MakeWriteSafe) -> None:
    async def broken(op: LookupOperation) -> LookupResult:
        raise ConnectionError("shop API down")

    ws, shop = make_ws(), Shop(faults=["commit_then_timeout"], lookup_answer=broken)
    submit_order = order_tool(ws, shop)
    await unknown_outcome(submit_order("A1", idempotency_key="ord-4"))

    error = await unknown_outcome(submit_order("A1", idempotency_key="ord-4"))

    assert error.envelope.retry_after_ms == 1_000
    assert error.envelope.cause == "lookup_unknown"
    assert shop.placed == 1
    evidence = await unknown_evidence(ws, "ord-4")
    assert evidence["exception"] == "builtins.ConnectionError"
    assert evidence["message"] == "shop API down"


async def test_a_hanging_lookup_is_cut_off_by_its_timeout(make_ws: MakeWriteSafe) -> None:
    async def hangs(op: LookupOperation) -> LookupResult:
        await asyncio.sleep(3_600)
        return NotFound()

    ws, shop = make_ws(), Shop(faults=["commit_then_timeout"], lookup_answer=hangs)
    submit_order = order_tool(ws, shop, lookup_timeout=0.2)
    await unknown_outcome(submit_order("A1", idempotency_key="ord-5"))

    async with asyncio.timeout(30):  # bounded: far below the lookup's hour
        await unknown_outcome(submit_order("A1", idempotency_key="ord-5"))

    evidence = await unknown_evidence(ws, "ord-5")
    assert evidence["reason"] == "the lookup did not answer within 0.2s"


async def test_an_unknown_answer_or_a_wrong_type_stays_unknown(make_ws: MakeWriteSafe) -> None:
    answers: list[object] = [Unknown("index is rebuilding"), {"order_id": "o-1"}]

    async def odd(op: LookupOperation) -> LookupResult:
        return answers.pop(0)  # type: ignore[return-value]

    ws, shop = make_ws(), Shop(faults=["commit_then_timeout"], lookup_answer=odd)
    submit_order = order_tool(ws, shop)
    await unknown_outcome(submit_order("A1", idempotency_key="ord-6"))
    await unknown_outcome(submit_order("A1", idempotency_key="ord-6"))
    await unknown_outcome(submit_order("A1", idempotency_key="ord-6"))

    status = await ws.status("ord-6")
    assert status is not None
    reasons = [a.evidence["reason"] for a in status.attempts[1:] if a.evidence is not None]
    assert reasons == [
        "index is rebuilding",
        "the lookup returned dict, not Found, NotFound or Unknown",
    ]
    assert shop.placed == 1


async def test_without_a_lookup_an_unknown_outcome_is_never_replayed(
    make_ws: MakeWriteSafe,
) -> None:
    ws, shop = make_ws(), Shop(faults=["timeout_before_commit"])
    submit_order = order_tool(ws, shop, with_lookup=False)
    first = await unknown_outcome(submit_order("A1", idempotency_key="ord-7"))

    error = await unknown_outcome(submit_order("A1", idempotency_key="ord-7"))

    # The call is answered with what the operation ended with; nothing runs, nothing is asked.
    assert error.envelope == first.envelope
    assert error.envelope.retry_after_ms is None
    assert shop.placed == 0
    status = await ws.status("ord-7")
    assert status is not None
    assert [a.kind for a in status.attempts] == [AttemptKind.EXECUTION]


async def test_proven_absence_after_an_unclassified_failure_is_terminal(
    make_ws: MakeWriteSafe,
) -> None:
    ws, shop = make_ws(), Shop(faults=["unclassified"])
    submit_order = order_tool(ws, shop)
    with pytest.raises(WriteSafeError) as first:
        await submit_order("A1", idempotency_key="ord-8")
    assert (first.value.code, first.value.envelope.side_effects) == ("UNKNOWN_ERROR", "unknown")

    with pytest.raises(WriteSafeError) as second:
        await submit_order("A1", idempotency_key="ord-8")
    with pytest.raises(WriteSafeError) as third:
        await submit_order("A1", idempotency_key="ord-8")

    for error in (second.value, third.value):
        assert (error.code, error.envelope.side_effects) == ("UNKNOWN_ERROR", "none")
        assert error.envelope.cause == "absent_after_unclassified"
        assert error.envelope.operation is not None
        assert error.envelope.operation.status == "failed"
    assert shop.placed == 0
    assert shop.lookups == 1


async def test_proven_absence_with_no_budget_left_is_retry_exhausted(
    make_ws: MakeWriteSafe,
) -> None:
    ws, shop = make_ws(), Shop(faults=["timeout_before_commit"])
    submit_order = order_tool(ws, shop, max_executions=1)
    await unknown_outcome(submit_order("A1", idempotency_key="ord-9"))

    with pytest.raises(WriteSafeError) as raised:
        await submit_order("A1", idempotency_key="ord-9")

    assert raised.value.code == "RETRY_EXHAUSTED"
    assert raised.value.envelope.cause == "OUTCOME_UNKNOWN"  # the code that spent the budget
    assert raised.value.envelope.side_effects == "none"
    assert shop.placed == 0
    status = await ws.status("ord-9")
    assert status is not None
    assert (status.status, status.executions) == (Status.FAILED, 1)


async def test_a_crashed_execution_is_looked_up_once_its_lease_expires(
    make_ws: MakeWriteSafe,
) -> None:
    clock = ManualClock()
    ws, shop = make_ws(clock=clock, lease_seconds=2.0, wait_timeout=0), Shop()
    submit_order = order_tool(ws, shop)
    claim = await claimed_by_a_dead_worker(ws, shop, submit_order, "ord-10", lease_seconds=2.0)
    with pytest.raises(WriteSafeError) as live:  # the first look finds the lease running
        await submit_order("A1", idempotency_key="ord-10")
    assert live.value.code == "IN_PROGRESS"
    clock.advance(3.0)  # nothing renewed it for longer than a lease

    order = await submit_order("A1", idempotency_key="ord-10")

    assert order == {"order_id": "o-1", "sku": "A1"}
    assert shop.placed == 1
    # The dead worker's late report is fenced off: the found result stands.
    assert await late_failure_report(ws, claim) is None
    status = await ws.status("ord-10")
    assert status is not None
    assert status.status is Status.SUCCEEDED
    # The record says so too: the taken-over execution is closed as the lookup found it.
    execution = status.attempts[0]
    assert (execution.kind, execution.outcome) == (AttemptKind.EXECUTION, "succeeded")
    assert execution.evidence == {
        "closed_by": "takeover",
        "reason": "the lease ran out before the execution reported",
    }
    record = await ws.ledger.get("default", "ord-10")
    assert record is not None
    assert record.last_code is None


async def test_a_different_payload_on_an_unknown_outcome_is_key_reused(
    make_ws: MakeWriteSafe,
) -> None:
    ws, shop = make_ws(), Shop(faults=["commit_then_timeout"])
    submit_order = order_tool(ws, shop)
    await unknown_outcome(submit_order("A1", idempotency_key="ord-11"))

    with pytest.raises(WriteSafeError) as raised:
        await submit_order("B2", idempotency_key="ord-11")

    assert raised.value.code == "KEY_REUSED"
    assert shop.lookups == 0


async def test_concurrent_retries_after_proven_absence_execute_once(
    make_ws: MakeWriteSafe,
) -> None:
    # Two workers (separate pools, no shared memory) retry the same unknown key at once: both
    # may see it absent, but only one restart wins the compare-and-set.
    shop = Shop(faults=["timeout_before_commit"])
    workers = [make_ws(), make_ws()]
    tools = [order_tool(ws, shop) for ws in workers]
    await unknown_outcome(tools[0]("A1", idempotency_key="ord-12"))

    results = await asyncio.gather(*(tool("A1", idempotency_key="ord-12") for tool in tools))

    assert results[0] == results[1] == {"order_id": "o-1", "sku": "A1"}
    assert shop.placed == 1


async def test_the_key_reaches_the_write_and_the_lookup(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    seen: list[tuple[str, str]] = []

    async def find(op: LookupOperation) -> LookupResult:
        seen.append(("lookup", op.key))
        assert op.arguments == {"sku": "A1"}
        assert (op.scope, op.tool, op.executions) == ("t-1", "reference", 1)
        assert [a.kind for a in op.attempts] == [AttemptKind.EXECUTION]
        return Found({"reference": op.key})

    @ws.tool("reference", lookup=find, settle_after=0)
    async def reference(sku: str) -> dict[str, str]:
        seen.append(("write", ws.current_operation().key))
        raise TimeoutError

    await unknown_outcome(reference("A1", idempotency_key="ref-1", scope="t-1"))
    assert await reference("A1", idempotency_key="ref-1", scope="t-1") == {"reference": "ref-1"}
    assert seen == [("write", "ref-1"), ("lookup", "ref-1")]
