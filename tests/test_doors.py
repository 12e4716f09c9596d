"""Every door a result comes through is checked by one rule against the tool's return annotation,
and a lookup answer the ledger can disprove, or one that came too late, is not believed."""

from __future__ import annotations

import datetime
import decimal
import time
from typing import Any

import pytest
from pydantic import BaseModel

from tests.conftest import MakeWriteSafe
from tests.reconcile_support import DEAD_WORKER, Shop, order_tool
from writesafe import Found, LookupOperation, Status, WriteSafeError
from writesafe.ledger import AttemptKind, Intent, LeaseHeld, ManualClock, OperationRecord
from writesafe.reconciler import CODES, LookupResult, NextAction, Unknown
from writesafe.reconciler._failures import cut_short, failure_outcome
from writesafe.reconciler._misfit import RESULT_INVALID


def handed_off(error: pytest.ExceptionInfo[WriteSafeError], cause: str = "needs_attention") -> None:
    envelope = error.value.envelope
    assert (envelope.code, envelope.next_action, envelope.cause) == (
        "UNKNOWN_ERROR",
        NextAction.HANDOFF,
        cause,
    ), envelope


async def test_a_result_that_does_not_fit_goes_to_a_person_and_never_runs_again(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    runs = 0

    @ws.tool("count")
    async def count() -> dict[str, int]:
        nonlocal runs
        runs += 1
        return "oops"  # type: ignore[return-value]

    for _ in range(2):
        with pytest.raises(WriteSafeError) as error:
            await count(idempotency_key="k")
        handed_off(error)
        assert "does not fit" in error.value.envelope.message
    assert runs == 1
    status = await ws.status("k")
    assert status is not None
    assert (status.status, status.result) == (Status.NEEDS_ATTENTION, None)
    [run] = [a for a in status.attempts if a.kind is AttemptKind.EXECUTION]
    assert run.evidence is not None
    assert (run.evidence["reason"], run.evidence["excerpt"]) == ("does_not_fit", "'oops'")
    assert status.caller_envelope() == error.value.envelope


async def test_a_found_result_that_does_not_fit_is_not_believed(make_ws: MakeWriteSafe) -> None:
    async def found_nonsense(op: LookupOperation) -> LookupResult:
        return Found("not a dict")

    ws = make_ws()
    shop = Shop(faults=["commit_then_timeout"], lookup_answer=found_nonsense)
    submit_order = order_tool(ws, shop)
    with pytest.raises(WriteSafeError):
        await submit_order("A1", idempotency_key="k")

    with pytest.raises(WriteSafeError) as error:
        await submit_order("A1", idempotency_key="k")
    handed_off(error)
    status = await ws.status("k")
    assert status is not None
    assert status.status is Status.NEEDS_ATTENTION
    evidence = status.attempts[-1].evidence
    assert evidence is not None
    assert evidence["excerpt"] == "'not a dict'"
    assert shop.placed == 1


async def test_a_stored_result_that_no_longer_fits_is_a_handoff_not_a_value(
    make_ws: MakeWriteSafe,
) -> None:
    first = make_ws()

    @first.tool("quote")
    async def quote() -> str:
        return "abc"

    assert await quote(idempotency_key="k") == "abc"
    await first._guard.flush()
    redeployed = make_ws()  # the tool's declared type changed since

    @redeployed.tool("quote")
    async def quote_again() -> int:
        raise AssertionError("a key whose write ran must not run again")

    with pytest.raises(WriteSafeError) as error:
        await quote_again(idempotency_key="k")
    handed_off(error, RESULT_INVALID)
    status = await redeployed.status("k")
    assert status is not None
    assert (status.status, status.result) == (Status.SUCCEEDED, "abc")  # the record is evidence


async def _never_sent(make_ws: MakeWriteSafe, answer: Any) -> tuple[Any, Any, Shop]:
    """An operation whose only execution's fence refused its send (its lease ran out first) and
    that reconciliation now finds `outcome_unknown`; its lookup answers `answer`."""
    clock = ManualClock()
    ws = make_ws(clock=clock)

    async def lookup(op: LookupOperation) -> LookupResult:
        return answer

    shop = Shop(lookup_answer=lookup)
    submit_order = order_tool(ws, shop)
    await ws.start()
    call = submit_order.prepare(("A1",), {}, "k", "default", None)
    intent = Intent(
        scope="default",
        key="k",
        tool="submit_order",
        fingerprint=call.fingerprint,
        arguments=call.bound.arguments_json,
        owner=DEAD_WORKER,
        lease_seconds=1.0,
        max_executions=3,
    )
    claim = await ws.ledger.claim(intent)
    clock.advance(2.0)
    expired = await ws.ledger.expire(claim.operation)
    if isinstance(expired, LeaseHeld):  # SQLite judges a lease by watching it: watch it run out
        clock.advance(expired.seconds_left)
        expired = await ws.ledger.expire(claim.operation)
    assert isinstance(expired, OperationRecord)
    assert expired.status is Status.OUTCOME_UNKNOWN
    refused = cut_short(
        lease_lost=True,
        sent_before=False,
        fence_closed=False,
        timed_out=False,
        timeout=None,
        codes=CODES,
    )
    assert refused is not None
    # The stalled writer wakes, its fence refuses the send, and its report is fenced off.
    late = await ws.ledger.finish(claim.operation, DEAD_WORKER, failure_outcome(refused))
    assert late is None
    return ws, submit_order, shop


@pytest.mark.parametrize("door", ["reconcile", "inline"])
async def test_a_found_the_ledger_disproves_goes_to_a_person(
    make_ws: MakeWriteSafe, door: str
) -> None:
    ws, submit_order, shop = await _never_sent(make_ws, Found({"order_id": "o-9", "sku": "A1"}))

    if door == "reconcile":
        report = await ws.reconcile()
        assert (report.examined, report.escalated, report.found) == (1, 1, 0)
    with pytest.raises(WriteSafeError) as error:
        await submit_order("A1", idempotency_key="k")
    handed_off(error)
    status = await ws.status("k")
    assert status is not None
    assert (status.status, status.result) == (Status.NEEDS_ATTENTION, None)
    [lookup] = [a for a in status.attempts if a.kind is AttemptKind.LOOKUP]
    assert lookup.evidence is not None
    assert "no execution of this operation sent its write" in lookup.evidence["reason"]
    assert '"o-9"' in lookup.evidence["found"]
    assert shop.placed == 0


async def test_a_lookup_that_blocks_past_its_timeout_is_discarded_as_late(
    make_ws: MakeWriteSafe,
) -> None:
    async def blocking(op: LookupOperation) -> LookupResult:
        time.sleep(0.3)  # blocks the loop: asyncio cannot cancel it  # noqa: ASYNC251
        return Found({"order_id": "o-1", "sku": "A1"})

    ws = make_ws()
    shop = Shop(faults=["commit_then_timeout"], lookup_answer=blocking)
    submit_order = order_tool(ws, shop, lookup_timeout=0.05)
    with pytest.raises(WriteSafeError):
        await submit_order("A1", idempotency_key="k")

    report = await ws.reconcile()
    assert (report.examined, report.found, report.still_unknown) == (1, 0, 1)
    status = await ws.status("k")
    assert status is not None
    assert status.status is Status.OUTCOME_UNKNOWN
    evidence = status.attempts[-1].evidence
    assert evidence is not None
    assert (evidence["late"], evidence["answer"]) == (True, "Found")


async def test_an_unknown_answer_is_still_asked_again(make_ws: MakeWriteSafe) -> None:
    """The escalation is for answers nobody can believe, not for honest doubt."""
    ws, _, _ = await _never_sent(make_ws, Unknown("index stale"))
    report = await ws.reconcile()
    assert (report.examined, report.still_unknown, report.escalated) == (1, 1, 0)


class Order(BaseModel):
    sku: str
    quantity: int = 1


@pytest.mark.parametrize("backend", ["sqlite"])  # refused before any store is touched
@pytest.mark.parametrize(
    ("args", "kwargs", "field"),
    [
        pytest.param(("abc",), {}, "n", id="not-an-int"),
        pytest.param((), {}, "n", id="missing"),
        pytest.param((1,), {"colour": "red"}, "colour", id="unexpected"),
        pytest.param((1, 2, 3), {}, "arguments", id="too-many"),
        pytest.param((1,), {"order": {"sku": 7}}, "order.sku", id="a-model-field"),
    ],
)
async def test_arguments_are_what_the_tool_declares(
    make_ws: MakeWriteSafe, args: tuple[Any, ...], kwargs: dict[str, Any], field: str
) -> None:
    ws = make_ws()

    @ws.tool("declared")
    async def declared(n: int, order: Order | None = None) -> None:
        raise AssertionError("must not execute")

    with pytest.raises(WriteSafeError) as invalid:
        await declared(*args, **kwargs, idempotency_key="k")  # type: ignore[call-arg]
    assert (invalid.value.envelope.code, invalid.value.envelope.field) == ("INPUT_INVALID", field)
    assert await ws.ledger.list() == []


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_the_tool_receives_the_validated_values(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    seen: list[Any] = []

    @ws.tool("declared")
    async def declared(n: int, order: Order) -> int:
        seen.append((n, order))
        return n

    assert await declared("7", {"sku": "A1"}, idempotency_key="k") == 7  # type: ignore[arg-type]
    # The declared form is the canonical one: the same call spelt as the declared types replays.
    assert await declared(7, Order(sku="A1"), idempotency_key="k") == 7
    assert seen == [(7, Order(sku="A1"))]


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(
    ("first", "second", "field"),
    [
        pytest.param({1, 2}, [1, 2], "x", id="set-and-list"),
        pytest.param(b"abc", "abc", "x", id="bytes-and-str"),
        pytest.param(decimal.Decimal("1.10"), "1.10", "x", id="decimal-and-str"),
        pytest.param({"a": {1: "b"}}, {"a": {"1": "b"}}, "x.a.1", id="int-key-and-str-key"),
        pytest.param([datetime.date(2026, 1, 2)], ["2026-01-02"], "x.0", id="date-and-str"),
    ],
)
async def test_under_any_values_json_cannot_tell_apart_are_refused(
    make_ws: MakeWriteSafe, first: Any, second: Any, field: str
) -> None:
    ws = make_ws()

    @ws.tool("open")
    async def open_tool(x: Any) -> Any:
        return x

    with pytest.raises(WriteSafeError) as refused:
        await open_tool(first, idempotency_key="k")
    assert (refused.value.envelope.code, refused.value.envelope.field) == ("INPUT_INVALID", field)
    assert await open_tool(second, idempotency_key="k") == second  # plain JSON data is accepted
