"""Reconciliation jobs and operator resolution, in process, on every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
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
from tests.service.support import issue_keys
from writesafe import (
    Found,
    LookupOperation,
    NotFound,
    OperationNotFound,
    ReconcilerBusy,
    ReconcileReport,
    ResolutionRefused,
    Status,
    Unknown,
    WriteSafeError,
    WriteSafeSettings,
)
from writesafe.ledger import AttemptKind, ManualClock, Role
from writesafe.reconciler import LookupResult, NextAction, to_call_tool_result, to_problem
from writesafe.service import ServiceSettings, create_app


def budget(max_checks: int = 3, **more: Any) -> WriteSafeSettings:
    """Settings with a small check budget: backoff 2s, 4s, … capped at 60s."""
    return WriteSafeSettings(
        reconcile_max_checks=max_checks, reconcile_backoff=2.0, reconcile_backoff_max=60.0, **more
    )


def counts(report: ReconcileReport) -> dict[str, int]:
    return {
        name: value
        for name, value in report.model_dump().items()
        if name != "seconds" and value != 0
    }


async def test_a_pass_resolves_found_and_absent_without_executing(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop(faults=["commit_then_timeout", "timeout_before_commit"])
    submit_order = order_tool(ws, shop)
    await unknown_outcome(submit_order("A1", idempotency_key="hit"))
    await unknown_outcome(submit_order("B2", idempotency_key="miss"))

    report = await ws.reconcile()

    assert counts(report) == {"examined": 2, "found": 1, "absent": 1}
    assert shop.placed == 1  # the reconciler itself never runs a write
    hit, miss = await ws.status("hit"), await ws.status("miss")
    assert hit is not None
    assert miss is not None
    assert (hit.status, hit.result) == (Status.SUCCEEDED, {"order_id": "o-1", "sku": "A1"})
    assert miss.status is Status.FAILED
    assert miss.error is not None
    assert (miss.error.code, miss.error.side_effects) == ("TEMP_UNAVAILABLE", "none")
    assert miss.attempts[-1].actor == "reconciler"
    # Nothing is due any more; the caller of the missing order comes back and it runs once.
    assert counts(await ws.reconcile()) == {}
    assert await submit_order("B2", idempotency_key="miss") == {"order_id": "o-2", "sku": "B2"}
    assert await submit_order("A1", idempotency_key="hit") == {"order_id": "o-1", "sku": "A1"}
    assert shop.placed == 2


async def test_absent_with_the_budget_spent_is_retry_exhausted(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop(faults=["timeout_before_commit"])
    submit_order = order_tool(ws, shop, max_executions=1)
    await unknown_outcome(submit_order("A1", idempotency_key="k"))

    assert counts(await ws.reconcile()) == {"examined": 1, "absent": 1}

    with pytest.raises(WriteSafeError) as raised:
        await submit_order("A1", idempotency_key="k")
    assert raised.value.code == "RETRY_EXHAUSTED"
    assert shop.placed == 0


async def test_unknown_answers_back_off_then_escalate_with_the_evidence(
    make_ws: MakeWriteSafe,
) -> None:
    async def undecided(op: LookupOperation) -> LookupResult:
        return Unknown("search index is stale")

    clock = ManualClock()
    ws = make_ws(clock=clock, settings=budget(max_checks=3))
    shop = Shop(faults=["commit_then_timeout"], lookup_answer=undecided)
    submit_order = order_tool(ws, shop)
    await unknown_outcome(submit_order("A1", idempotency_key="k"))

    assert counts(await ws.reconcile()) == {"examined": 1, "still_unknown": 1}
    clock.advance(1.9)
    assert counts(await ws.reconcile()) == {}  # backing off: 2s after the first check
    clock.advance(0.1)
    assert counts(await ws.reconcile()) == {"examined": 1, "still_unknown": 1}
    clock.advance(3.9)
    assert counts(await ws.reconcile()) == {}  # then 4s
    clock.advance(0.1)
    assert counts(await ws.reconcile()) == {"examined": 1, "escalated": 1}
    clock.advance(3_600)
    assert counts(await ws.reconcile()) == {}

    status = await ws.status("k")
    assert status is not None
    assert status.status is Status.NEEDS_ATTENTION
    lookups = [a for a in status.attempts if a.kind is AttemptKind.LOOKUP]
    assert [a.outcome for a in lookups] == ["unknown"] * 3
    assert lookups[-1].evidence is not None
    assert lookups[-1].evidence["reason"] == "search index is stale"
    assert lookups[-1].evidence["escalated_after_checks"] == 3
    # Callers are told to stop waiting for reconciliation: a person decides now, and every
    # rendering says so (software branching on next_action stops instead of polling).
    with pytest.raises(WriteSafeError) as escalated:
        await submit_order("A1", idempotency_key="k")
    envelope = escalated.value.envelope
    assert (envelope.code, envelope.next_action, envelope.cause) == (
        "UNKNOWN_ERROR",
        NextAction.HANDOFF,
        "needs_attention",
    )
    assert "operator" in envelope.message
    assert to_problem(envelope).body["next_action"] == "handoff"
    mcp = to_call_tool_result(envelope).structured_content
    assert mcp is not None
    assert mcp["error"]["next_action"] == "handoff"
    assert status.caller_envelope() == envelope  # what the console shows
    assert shop.placed == 1


async def test_a_tool_without_a_lookup_escalates_after_the_budget(make_ws: MakeWriteSafe) -> None:
    clock = ManualClock()
    ws, shop = make_ws(clock=clock, settings=budget(max_checks=2)), Shop(faults=["unclassified"])
    submit_order = order_tool(ws, shop, with_lookup=False)
    with pytest.raises(WriteSafeError):
        await submit_order("A1", idempotency_key="k")

    first = await ws.reconcile()
    clock.advance(2.0)
    second = await ws.reconcile()

    assert counts(first) == {"examined": 1, "still_unknown": 1}
    assert counts(second) == {"examined": 1, "escalated": 1}
    status = await ws.status("k")
    assert status is not None
    assert status.status is Status.NEEDS_ATTENTION
    evidence = status.attempts[-1].evidence
    assert evidence is not None
    assert evidence["reason"] == "the tool has no lookup"


async def test_a_premature_not_found_waits_for_the_window_without_spending_budget(
    make_ws: MakeWriteSafe,
) -> None:
    clock = ManualClock()
    ws = make_ws(clock=clock, settings=budget(max_checks=1))
    shop = Shop(faults=["timeout_before_commit"])
    submit_order = order_tool(ws, shop, settle_after=30.0)
    await unknown_outcome(submit_order("A1", idempotency_key="k"))

    # With a budget of one check, a counted premature answer would escalate at once.
    assert counts(await ws.reconcile()) == {"examined": 1, "still_unknown": 1}
    clock.advance(29.0)
    assert counts(await ws.reconcile()) == {}
    clock.advance(1.0)
    assert counts(await ws.reconcile()) == {"examined": 1, "absent": 1}
    assert shop.lookups == 2


async def test_crashed_in_flight_leases_are_expired_then_looked_up(
    make_ws: MakeWriteSafe,
) -> None:
    clock = ManualClock()
    ws, shop = make_ws(clock=clock, lease_seconds=5.0), Shop()
    submit_order = order_tool(ws, shop)
    claim = await claimed_by_a_dead_worker(ws, shop, submit_order, "k", lease_seconds=5.0)

    assert counts(await ws.reconcile()) == {}  # the lease is still live (SQLite: first seen)
    clock.advance(5.0)
    report = await ws.reconcile()

    assert counts(report) == {"examined": 1, "found": 1, "expired_leases": 1}
    assert await late_failure_report(ws, claim) is None
    status = await ws.status("k")
    assert status is not None
    assert (status.status, status.result) == (Status.SUCCEEDED, {"order_id": "o-1", "sku": "A1"})


async def test_a_takeover_then_a_lookup_close_the_superseded_execution_on_the_record(
    make_ws: MakeWriteSafe,
) -> None:
    busy = [True]

    async def unknown_once(op: LookupOperation) -> LookupResult:
        if busy and busy.pop():
            return Unknown("the shop is busy")
        return Found(shop.orders[op.key])

    clock = ManualClock()
    ws, shop = make_ws(clock=clock, lease_seconds=5.0), Shop(lookup_answer=unknown_once)
    submit_order = order_tool(ws, shop)
    claim = await claimed_by_a_dead_worker(ws, shop, submit_order, "k", lease_seconds=5.0)
    await ws.reconcile()  # SQLite: the lease is watched from here
    clock.advance(5.0)

    assert counts(await ws.reconcile()) == {
        "examined": 1, "still_unknown": 1, "expired_leases": 1
    }  # fmt: skip
    taken_over = await ws.status("k")
    assert taken_over is not None
    execution = taken_over.attempts[0]
    assert (execution.kind, execution.outcome, execution.code) == (
        AttemptKind.EXECUTION, "outcome_unknown", "LEASE_EXPIRED"
    )  # fmt: skip
    assert execution.evidence == {
        "closed_by": "takeover",
        "reason": "the lease ran out before the execution reported",
    }
    assert execution.finished_at is not None

    clock.advance(60.0)
    assert counts(await ws.reconcile()) == {"examined": 1, "found": 1}
    # The dead worker's report, arriving after all, is fenced off and changes nothing.
    assert await late_failure_report(ws, claim) is None
    settled = await ws.status("k")
    assert settled is not None
    assert (settled.status, settled.attempts[0].outcome) == (Status.SUCCEEDED, "succeeded")
    assert [a.kind for a in settled.attempts] == [AttemptKind.EXECUTION] + [AttemptKind.LOOKUP] * 2
    record = await ws.ledger.get("default", "k")
    assert record is not None
    assert record.last_code is None  # not the takeover's LEASE_EXPIRED
    # The service's attempts listing tells the same story.
    tokens = await issue_keys(ws, ["default"])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(ws, ServiceSettings(rate_limits=False))),
        base_url="http://service.test",
        headers={"Authorization": f"Bearer {tokens['default', Role.OPERATOR]}"},
    ) as client:
        listed = await client.get("/v1/operations/k/attempts")
    assert listed.status_code == 200, listed.text
    assert [(a["kind"], a["outcome"], a["code"]) for a in listed.json()["items"]] == [
        ("execution", "succeeded", "LEASE_EXPIRED"),
        ("lookup", "unknown", None),
        ("lookup", "found", None),
    ]


async def test_one_pass_takes_over_every_crashed_lease_not_one_batch(
    make_ws: MakeWriteSafe,
) -> None:
    clock = ManualClock()
    ws, shop = make_ws(clock=clock, lease_seconds=5.0), Shop()
    submit_order = order_tool(ws, shop)
    for n in range(40):  # two and a half batches of the default 16
        await claimed_by_a_dead_worker(ws, shop, submit_order, f"k{n}", lease_seconds=5.0)
    clock.advance(5.0)  # every lease has run out by the wall clock
    once = make_ws(clock=clock, lease_seconds=5.0)  # a `reconcile --once` job: a fresh watch
    order_tool(once, shop)

    report = await once.reconcile()

    assert counts(report) == {"examined": 40, "found": 40, "expired_leases": 40}
    assert counts(await once.reconcile()) == {}


async def test_limit_tool_and_older_than_select_what_a_pass_examines(
    make_ws: MakeWriteSafe,
) -> None:
    clock = ManualClock()
    ws, shop = make_ws(clock=clock), Shop(faults=["commit_then_timeout"] * 4)
    submit_order = order_tool(ws, shop)

    @ws.tool("refund", lookup=shop.find, settle_after=0)
    async def refund(amount: int, idempotency_key: str) -> int:
        raise TimeoutError

    for key in ("a", "b", "c"):
        await unknown_outcome(submit_order("A1", idempotency_key=key))
    await unknown_outcome(refund(5, idempotency_key="r"))
    clock.advance(10.0)
    await unknown_outcome(submit_order("A1", idempotency_key="young"))

    assert counts(await ws.reconcile(tool="refund")) == {"examined": 1, "absent": 1}
    assert counts(await ws.reconcile(limit=2, older_than=5.0)) == {"examined": 2, "found": 2}
    assert counts(await ws.reconcile(older_than=5.0)) == {"examined": 1, "found": 1}
    assert counts(await ws.reconcile()) == {"examined": 1, "found": 1}

    for bad in ({"tool": "nope"}, {"limit": 0}, {"older_than": -1.0}):
        with pytest.raises(WriteSafeError) as raised:
            await ws.reconcile(**bad)  # type: ignore[arg-type]
        assert raised.value.code == "INPUT_INVALID"


async def test_an_inline_resolution_supersedes_a_claimed_check(make_ws: MakeWriteSafe) -> None:
    # A worker holds the claim while a caller's own lookup settles the operation first.
    ws, shop = make_ws(), Shop(faults=["commit_then_timeout"])
    submit_order = order_tool(ws, shop)
    await unknown_outcome(submit_order("A1", idempotency_key="k"))
    batch = await ws.ledger.claim_due(limit=10, lease_seconds=30, tools=["submit_order"])
    assert [op.key for op in batch.operations] == ["k"]
    assert counts(await ws.reconcile()) == {}  # leased: no second worker takes it

    assert await submit_order("A1", idempotency_key="k") == {"order_id": "o-1", "sku": "A1"}

    stale = batch.operations[0]
    assert await ws.ledger.settle(stale, AttemptKind.LOOKUP, {}, status=Status.FAILED) is None


async def escalated(ws: Any, shop: Shop, key: str, **options: Any) -> Any:
    """An operation of `submit_order` that reconciliation gave up on."""

    async def undecided(op: LookupOperation) -> LookupResult:
        return Unknown("no answer")

    shop.lookup_answer = undecided
    submit_order = order_tool(ws, shop, **options)
    await unknown_outcome(submit_order("A1", idempotency_key=key))
    assert counts(await ws.reconcile()) == {"examined": 1, "escalated": 1}
    shop.lookup_answer = None
    return submit_order


async def test_an_operator_resolves_needs_attention_as_succeeded(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(settings=budget(max_checks=1)), Shop(faults=["commit_then_timeout"])
    submit_order = await escalated(ws, shop, "k")

    resolved = await ws.resolve(
        "k",
        outcome="succeeded",
        result={"order_id": "o-1", "sku": "A1"},
        reason="found order o-1 in the shop's back office",
        actor="alice@example.com",
        evidence={"ticket": "OPS-7"},
    )

    assert resolved.status is Status.SUCCEEDED
    assert resolved.result == {"order_id": "o-1", "sku": "A1"}
    operator = resolved.attempts[-1]
    assert (operator.kind, operator.outcome) == (AttemptKind.OPERATOR, "succeeded")
    assert (operator.actor, operator.reason) == (
        "alice@example.com",
        "found order o-1 in the shop's back office",
    )
    assert operator.evidence is not None
    assert operator.evidence["operator_evidence"] == {"ticket": "OPS-7"}
    assert operator.evidence["previous_status"] == "needs_attention"
    assert await submit_order("A1", idempotency_key="k") == {"order_id": "o-1", "sku": "A1"}
    assert shop.placed == 1


async def test_an_operator_resolves_needs_attention_as_failed(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(settings=budget(max_checks=1)), Shop(faults=["timeout_before_commit"])
    submit_order = await escalated(ws, shop, "k")

    resolved = await ws.resolve(
        "k", outcome="failed", reason="no such order in the shop", actor="bob"
    )

    assert resolved.status is Status.FAILED
    assert resolved.error is not None
    assert resolved.error.code == "TEMP_UNAVAILABLE"
    assert "resolved as failed by bob" in resolved.error.message
    # Proven absent by a person: the key continues within its budget, like a conclusive lookup.
    assert await submit_order("A1", idempotency_key="k") == {"order_id": "o-1", "sku": "A1"}
    assert shop.placed == 1


async def test_an_operator_resolves_an_unknown_outcome(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(settings=budget(max_checks=1)), Shop(faults=["commit_then_timeout"])
    submit_order = order_tool(ws, shop)
    await unknown_outcome(submit_order("A1", idempotency_key="k"))

    resolved = await ws.resolve(
        "k",
        outcome="succeeded",
        result={"order_id": "o-1", "sku": "A1"},
        reason="r",
        actor="a",
        evidence={"checked": "the shop's order list"},  # an unknown outcome needs it
    )

    assert resolved.status is Status.SUCCEEDED
    assert [a.kind for a in resolved.attempts] == [AttemptKind.EXECUTION, AttemptKind.OPERATOR]
    assert await submit_order("A1", idempotency_key="k") == {"order_id": "o-1", "sku": "A1"}
    assert shop.placed == 1


async def test_resolution_is_refused_once_settled(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(settings=budget(max_checks=1)), Shop()
    submit_order = order_tool(ws, shop)
    await submit_order("A1", idempotency_key="done")

    with pytest.raises(ResolutionRefused) as raised:
        await ws.resolve("done", outcome="failed", reason="r", actor="a")
    assert raised.value.status is Status.SUCCEEDED
    with pytest.raises(OperationNotFound):
        await ws.resolve("never", outcome="failed", reason="r", actor="a")
    status_after = await ws.status("done")
    assert status_after is not None
    assert [a.kind for a in status_after.attempts] == [AttemptKind.EXECUTION]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"outcome": "maybe", "reason": "r", "actor": "a"}, "outcome"),
        ({"outcome": "failed", "reason": " ", "actor": "a"}, "reason"),
        ({"outcome": "failed", "reason": "r", "actor": ""}, "actor"),
        ({"outcome": "failed", "reason": "r", "actor": "a", "result": 1}, "result"),
        (
            {"outcome": "failed", "reason": "r", "actor": "a", "evidence": {"x": object()}},
            "evidence",
        ),
        (
            {"outcome": "failed", "reason": "r", "actor": "a", "evidence": {"x": float("nan")}},
            "evidence",
        ),
        ({"outcome": "failed", "reason": "r", "actor": "a", "evidence": ["x"]}, "evidence"),
    ],
)
async def test_bad_resolution_input_is_a_typed_error(
    make_ws: MakeWriteSafe, options: dict[str, Any], field: str
) -> None:
    ws = make_ws()
    with pytest.raises(WriteSafeError) as raised:
        await ws.resolve("k", **options)
    assert (raised.value.code, raised.value.envelope.field) == ("INPUT_INVALID", field)


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_sqlite_holds_its_reconciler_lock_for_a_pass_not_for_a_life(
    make_ws: MakeWriteSafe,
) -> None:
    looking, answer = asyncio.Event(), asyncio.Event()

    async def slow_lookup(op: LookupOperation) -> LookupResult:
        looking.set()
        await answer.wait()
        return NotFound()

    first, second = make_ws(), make_ws()
    shop = Shop(faults=["timeout_before_commit"], lookup_answer=slow_lookup)
    order_tool(second, shop)
    await unknown_outcome(order_tool(first, shop)("A1", idempotency_key="k"))

    # A finished pass holds nothing, though its `WriteSafe` is still open.
    assert counts(await first.reconcile(older_than=3_600)) == {}
    assert counts(await second.reconcile(older_than=3_600)) == {}
    passing = asyncio.create_task(second.reconcile())
    await looking.wait()
    # While a pass runs, another process's pass is refused at once, with what to do.
    with pytest.raises(ReconcilerBusy, match="try again when that pass ends"):
        await first.reconcile()
    answer.set()
    assert counts(await passing)["examined"] == 1
    assert counts(await first.reconcile(older_than=3_600)) == {}


async def test_not_found_lookups_count_once_per_pass(make_ws: MakeWriteSafe) -> None:
    async def absent(op: LookupOperation) -> LookupResult:
        return NotFound()

    ws, shop = make_ws(), Shop(faults=["timeout_before_commit"] * 20, lookup_answer=absent)
    submit_order = order_tool(ws, shop)
    for n in range(20):
        await unknown_outcome(submit_order("A1", idempotency_key=f"k{n}"))

    report = await ws.reconcile()

    assert counts(report) == {"examined": 20, "absent": 20}
    assert shop.lookups == 20


async def test_a_hanging_or_raising_lookup_stays_unknown_in_a_pass(make_ws: MakeWriteSafe) -> None:
    async def hangs_or_raises(op: LookupOperation) -> LookupResult:
        if op.key == "raises":
            raise ConnectionError("shop API down")
        await asyncio.sleep(3_600)
        return NotFound()

    ws = make_ws()
    shop = Shop(faults=["commit_then_timeout"] * 2, lookup_answer=hangs_or_raises)
    submit_order = order_tool(ws, shop, lookup_timeout=0.2)
    await unknown_outcome(submit_order("A1", idempotency_key="hangs"))
    await unknown_outcome(submit_order("A1", idempotency_key="raises"))

    async with asyncio.timeout(30):  # bounded: far below the lookup's hour
        report = await ws.reconcile()

    assert counts(report) == {"examined": 2, "still_unknown": 2}
    for key, reason in (
        ("hangs", "the lookup did not answer within 0.2s"),
        ("raises", "shop API down"),
    ):
        evidence = await unknown_evidence(ws, key)
        assert reason in (evidence.get("reason"), evidence.get("message"))
