"""The guard's call semantics, each on the embedded default, PostgreSQL, and PostgreSQL + Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.conftest import MakeWriteSafe
from tests.round_trips import count_round_trips
from writesafe import (
    NoCurrentOperation,
    Status,
    ToolError,
    WriteSafe,
    WriteSafeError,
    WriteSafeSettings,
)
from writesafe.ledger import ManualClock


class Shop:
    """A downstream that counts the orders it committed."""

    def __init__(self) -> None:
        self.orders: list[dict[str, Any]] = []

    def commit(self, order: dict[str, Any]) -> dict[str, Any]:
        self.orders.append(order)
        return {"order_id": f"o-{len(self.orders)}", **order}


def order_tool(ws: WriteSafe, shop: Shop, **options: Any) -> Any:
    @ws.tool("submit_order", **options)
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        return shop.commit(order)

    return submit_order


async def test_first_call_executes_and_duplicates_replay(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop()
    submit = order_tool(ws, shop)

    first = await submit({"sku": "A1"}, idempotency_key="ord-7")
    again = await submit({"sku": "A1"}, idempotency_key="ord-7")

    assert first == again == {"order_id": "o-1", "sku": "A1"}
    assert len(shop.orders) == 1
    status = await ws.status("ord-7")
    assert status is not None
    assert status.status is Status.SUCCEEDED
    assert status.result == first
    assert [(a.execution, a.outcome) for a in status.attempts] == [(1, "succeeded")]


@pytest.mark.parametrize("backend", ["postgres+redis"])
async def test_a_first_execution_makes_the_four_round_trips_of_its_floor(
    make_ws: MakeWriteSafe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first-execution target's floor, counted: the lease, the intent commit, the outcome
    commit and (behind the answer) the cache write; nothing else."""
    ws, shop = make_ws(), Shop()
    submit = order_tool(ws, shop)
    await ws.start()
    sent = count_round_trips(ws.ledger.engine, monkeypatch)

    await submit({"sku": "A1"}, idempotency_key="ord-7")
    await ws._guard.flush()

    assert sent == ["redis", "ledger", "ledger", "redis"]
    assert len(shop.orders) == 1


@pytest.mark.parametrize("backend", ["postgres+redis"])
async def test_a_replay_is_one_redis_round_trip_and_no_ledger_statement(
    make_ws: MakeWriteSafe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay target's first half, counted rather than timed: a finished key is answered by
    the key store's one command, and neither the ledger nor redis-py's client is asked."""
    ws, shop = make_ws(), Shop()
    submit = order_tool(ws, shop)
    first = await submit({"sku": "A1"}, idempotency_key="ord-7")
    await ws._guard.flush()  # the cache fill runs behind the first answer
    sent = count_round_trips(ws.ledger.engine, monkeypatch)

    assert await submit({"sku": "A1"}, idempotency_key="ord-7") == first
    assert sent == ["redis"]
    assert len(shop.orders) == 1


@pytest.mark.parametrize("backend", ["postgres"])
async def test_without_redis_a_replay_is_one_ledger_statement(
    make_ws: MakeWriteSafe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL alone: a first execution is its intent and its outcome, and a replay the one
    claim statement, which reads the row holding the key when it cannot insert its own."""
    ws, shop = make_ws(), Shop()
    submit = order_tool(ws, shop)
    await ws.start()
    sent = count_round_trips(ws.ledger.engine, monkeypatch)

    first = await submit({"sku": "A1"}, idempotency_key="ord-7")
    assert sent == ["ledger", "ledger"]
    sent.clear()
    assert await submit({"sku": "A1"}, idempotency_key="ord-7") == first
    assert sent == ["ledger"]
    assert len(shop.orders) == 1


@pytest.mark.parametrize("value", [0, False, {}, [], "", None, 0.0])
async def test_falsy_results_replay_exactly(make_ws: MakeWriteSafe, value: Any) -> None:
    ws = make_ws()
    executions = 0

    @ws.tool("falsy")
    async def falsy() -> Any:
        nonlocal executions
        executions += 1
        return value

    assert await falsy(idempotency_key="k") == value
    replayed = await falsy(idempotency_key="k")
    assert replayed == value
    assert type(replayed) is type(value)
    assert executions == 1


async def test_a_fresh_process_replays_the_declared_type(make_ws: MakeWriteSafe) -> None:
    """A replay in another worker (no shared memory) restores the annotated return type."""
    first_ws, second_ws = make_ws(), make_ws()

    @first_ws.tool("ids")
    async def ids_first() -> tuple[int, ...]:
        return (1, 2)

    @second_ws.tool("ids")
    async def ids_second() -> tuple[int, ...]:
        raise AssertionError("must not execute")

    assert await ids_first(idempotency_key="k") == (1, 2)
    assert await ids_second(idempotency_key="k") == (1, 2)


async def test_timeout_becomes_outcome_unknown_and_is_never_rerun(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop()

    @ws.tool("slow_order", timeout=0.2)
    async def slow_order(order: dict[str, Any]) -> dict[str, Any]:
        shop.commit(order)  # the shop commits, then the answer never arrives in time
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    with pytest.raises(WriteSafeError) as first:
        await slow_order({"sku": "B"}, idempotency_key="ord-8")
    envelope = first.value.envelope
    assert envelope.code == "OUTCOME_UNKNOWN"
    assert envelope.side_effects == "unknown"
    assert envelope.next_action == "reconcile"
    assert envelope.retryable is False
    assert envelope.operation is not None
    assert envelope.operation.status == "outcome_unknown"

    with pytest.raises(WriteSafeError) as retry:
        await slow_order({"sku": "B"}, idempotency_key="ord-8")
    assert retry.value.envelope.code == "OUTCOME_UNKNOWN"
    assert len(shop.orders) == 1
    status = await ws.status("ord-8")
    assert status is not None
    assert status.status is Status.OUTCOME_UNKNOWN
    assert status.executions == 1


async def test_cancellation_inside_the_write_is_outcome_unknown(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()

    @ws.tool("cancelled")
    async def cancelled() -> None:
        raise asyncio.CancelledError

    with pytest.raises(WriteSafeError) as error:
        await cancelled(idempotency_key="c")
    assert error.value.envelope.code == "OUTCOME_UNKNOWN"


async def test_cancelling_the_caller_records_outcome_unknown(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    started = asyncio.Event()
    executions = 0

    @ws.tool("long")
    async def long() -> str:
        nonlocal executions
        executions += 1
        started.set()
        await asyncio.sleep(30)
        return "done"

    task = asyncio.create_task(long(idempotency_key="k"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(WriteSafeError) as retry:
        await long(idempotency_key="k")
    assert retry.value.envelope.code == "OUTCOME_UNKNOWN"
    assert executions == 1


@pytest.mark.parametrize(
    "error",
    [
        httpx.ReadTimeout("read timed out"),
        httpx.RemoteProtocolError("server disconnected"),
        ConnectionResetError("reset by peer"),
    ],
    ids=["read-timeout", "protocol-error", "reset"],
)
async def test_connection_lost_after_sending_is_outcome_unknown(
    make_ws: MakeWriteSafe, error: Exception
) -> None:
    ws = make_ws()
    executions = 0

    @ws.tool("send")
    async def send() -> None:
        nonlocal executions
        executions += 1
        raise error

    for _ in range(2):
        with pytest.raises(WriteSafeError) as caught:
            await send(idempotency_key="k")
        assert caught.value.envelope.code == "OUTCOME_UNKNOWN"
    assert executions == 1


async def test_nothing_sent_is_retried_within_the_budget(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(clock=ManualClock())
    executions = 0

    @ws.tool("connect", max_executions=3)
    async def connect() -> str:
        nonlocal executions
        executions += 1
        if executions < 3:
            raise httpx.ConnectError("connection refused")
        return "sent"

    assert await connect(idempotency_key="k") == "sent"
    status = await ws.status("k")
    assert status is not None
    assert [a.code for a in status.attempts] == ["TEMP_UNAVAILABLE", "TEMP_UNAVAILABLE", None]


async def test_unclassifiable_error_is_unknown_and_not_rerun(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    executions = 0

    @ws.tool("odd")
    async def odd() -> None:
        nonlocal executions
        executions += 1
        raise RuntimeError("something odd\nTraceback (most recent call last): secret")

    for _ in range(2):
        with pytest.raises(WriteSafeError) as caught:
            await odd(idempotency_key="k")
        envelope = caught.value.envelope
        assert envelope.code == "UNKNOWN_ERROR"
        assert envelope.side_effects == "unknown"
        assert "secret" not in envelope.message
    assert executions == 1
    status = await ws.status("k")
    assert status is not None
    assert status.attempts[0].evidence is not None
    assert status.attempts[0].evidence["exception"] == "builtins.RuntimeError"


@pytest.mark.pg_connections(30)  # a burst fills the default pools (10 + 20)
async def test_hundred_concurrent_duplicates_execute_once(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop()

    @ws.tool("submit_order")
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return shop.commit(order)

    results = await asyncio.gather(
        *(submit_order({"sku": "C"}, idempotency_key="burst") for _ in range(100))
    )
    assert len(shop.orders) == 1
    assert all(result == results[0] for result in results)


@pytest.mark.pg_connections(30)
async def test_duplicates_from_separate_workers_execute_once(make_ws: MakeWriteSafe) -> None:
    """Ten WriteSafe instances (no shared memory) × ten coroutines meet only in the stores.

    One pooled connection each (at most three PostgreSQL connections per instance, 30 in all): the
    race is between the instances, and a shared server's `max_connections` has other clients.
    """
    shop = Shop()
    tools = []
    for _ in range(10):
        ws = make_ws(settings=WriteSafeSettings(pool_size=1))

        @ws.tool("submit_order")
        async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(0.05)
            return shop.commit(order)

        tools.append(submit_order)
    results = await asyncio.gather(
        *(tool({"sku": "D"}, idempotency_key="race") for tool in tools for _ in range(10))
    )
    assert len(shop.orders) == 1
    assert all(result == results[0] for result in results)


async def test_waiters_get_in_progress_after_the_bound(make_ws: MakeWriteSafe) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    first_ws, second_ws = make_ws(), make_ws(wait_timeout=0.2)
    executions = 0

    async def slow() -> str:
        nonlocal executions
        executions += 1
        started.set()
        await release.wait()
        return "done"

    leader = first_ws.tool("slow")(slow)
    follower = second_ws.tool("slow")(slow)
    running = asyncio.create_task(leader(idempotency_key="k"))
    await started.wait()
    with pytest.raises(WriteSafeError) as waiting:
        await follower(idempotency_key="k")
    envelope = waiting.value.envelope
    assert envelope.code == "IN_PROGRESS"
    assert envelope.retryable is True
    assert envelope.retry_after_ms is not None
    assert envelope.retry_after_ms > 0
    release.set()
    assert await running == "done"
    assert await follower(idempotency_key="k") == "done"
    assert executions == 1


async def test_same_key_different_payload_is_key_reused(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop()
    submit = order_tool(ws, shop)
    await submit({"sku": "A"}, idempotency_key="k")

    with pytest.raises(WriteSafeError) as reused:
        await submit({"sku": "B"}, idempotency_key="k")
    assert reused.value.envelope.code == "KEY_REUSED"
    assert reused.value.envelope.field == "idempotency_key"
    assert len(shop.orders) == 1


async def test_key_reused_while_in_flight_and_while_unknown(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    started, release = asyncio.Event(), asyncio.Event()

    @ws.tool("held", timeout=None)
    async def held(n: int) -> int:
        started.set()
        await release.wait()
        return n

    running = asyncio.create_task(held(1, idempotency_key="k"))
    await started.wait()
    with pytest.raises(WriteSafeError) as in_flight:
        await held(2, idempotency_key="k")
    assert in_flight.value.envelope.code == "KEY_REUSED"
    release.set()
    assert await running == 1

    @ws.tool("lost", timeout=0.05)
    async def lost(n: int) -> None:
        await asyncio.sleep(30)

    with pytest.raises(WriteSafeError):
        await lost(1, idempotency_key="u")
    with pytest.raises(WriteSafeError) as unknown:
        await lost(2, idempotency_key="u")
    assert unknown.value.envelope.code == "KEY_REUSED"


async def test_key_order_and_rich_types_do_not_change_the_fingerprint(
    make_ws: MakeWriteSafe,
) -> None:
    import dataclasses
    import datetime
    import decimal
    import uuid

    from pydantic import BaseModel

    class Item(BaseModel):
        sku: str
        price: decimal.Decimal

    @dataclasses.dataclass
    class Meta:
        at: datetime.datetime
        ref: uuid.UUID

    ws = make_ws()
    executions = 0

    @ws.tool("rich")
    async def rich(payload: dict[str, Any], item: Item, meta: Meta) -> int:
        nonlocal executions
        executions += 1
        return executions

    meta = Meta(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), uuid.UUID(int=7))
    item = Item(sku="A", price=decimal.Decimal("9.50"))
    await rich({"a": 1, "b": 2}, item, meta, idempotency_key="k")
    assert await rich({"b": 2, "a": 1}, item=item, meta=meta, idempotency_key="k") == 1
    assert executions == 1


async def test_scopes_isolate_keys(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop()
    submit = order_tool(ws, shop)
    a = await submit({"sku": "A"}, idempotency_key="k", scope="tenant-a")
    b = await submit({"sku": "B"}, idempotency_key="k", scope="tenant-b")
    assert a != b
    assert len(shop.orders) == 2
    assert await ws.status("k") is None
    status = await ws.status("k", scope="tenant-b")
    assert status is not None
    assert status.result == b


async def test_key_function_and_key_forwarded_to_the_write(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    seen: list[tuple[str, str | None]] = []

    @ws.tool("forward", key=lambda order: order["request_id"])
    async def forward(order: dict[str, str], idempotency_key: str) -> str:
        seen.append((idempotency_key, ws.current_operation().key))
        return idempotency_key

    assert await forward({"request_id": "req-1"}) == "req-1"
    assert await forward({"request_id": "req-1"}) == "req-1"
    assert seen == [("req-1", "req-1")]
    with pytest.raises(NoCurrentOperation):  # outside the write there is none
        ws.current_operation()


async def test_a_key_given_both_ways_must_be_one_key(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop()

    @ws.tool("refund")
    async def refund(amount: int, idempotency_key: str) -> str:
        shop.commit({"amount": amount})
        return idempotency_key

    assert await refund.key("r-1")(5, idempotency_key="r-1") == "r-1"
    assert await refund.key(None, scope="tenant-a")(5, idempotency_key="r-2") == "r-2"
    with pytest.raises(WriteSafeError) as twice:
        await refund.key("r-3")(5, idempotency_key="r-4")
    assert twice.value.envelope.code == "INPUT_INVALID"
    assert twice.value.envelope.field == "idempotency_key"
    assert len(shop.orders) == 2
    assert await ws.status("r-2", scope="tenant-a") is not None
    assert await ws.status("r-3") is None
    assert await ws.status("r-4") is None


@pytest.mark.parametrize(
    "key",
    ["", " padded ", "x" * 256, "tab\tkey", "new\nline", 42],
    ids=["empty", "padded", "too-long", "tab", "newline", "not-a-string"],
)
async def test_invalid_keys_are_rejected_before_anything_is_recorded(
    make_ws: MakeWriteSafe, key: Any
) -> None:
    ws, shop = make_ws(), Shop()
    submit = order_tool(ws, shop)
    with pytest.raises(WriteSafeError) as invalid:
        await submit({"sku": "A"}, idempotency_key=key)
    assert invalid.value.envelope.code == "INPUT_INVALID"
    assert invalid.value.envelope.field == "idempotency_key"
    assert shop.orders == []
    assert await ws.ledger.list() == []


async def test_longest_and_unicode_keys_are_accepted(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop()
    submit = order_tool(ws, shop)
    for key in ("k" * 255, "заказ-7-✓"):
        await submit({"sku": "A"}, idempotency_key=key)
        status = await ws.status(key)
        assert status is not None
        assert status.key == key


@pytest.mark.parametrize(
    ("argument", "field"),
    [
        (float("nan"), "arguments"),
        (object(), "value"),
        ({"deep": [[[[float("inf")]]]]}, "arguments"),
    ],
    ids=["nan", "object", "nested-infinity"],
)
async def test_arguments_without_json_form_are_input_invalid(
    make_ws: MakeWriteSafe, argument: Any, field: str
) -> None:
    ws = make_ws()

    @ws.tool("echo")
    async def echo(value: Any) -> None:
        raise AssertionError("must not execute")

    with pytest.raises(WriteSafeError) as invalid:
        await echo(argument, idempotency_key="k")
    assert invalid.value.envelope.code == "INPUT_INVALID"
    assert invalid.value.envelope.field == field
    assert await ws.ledger.list() == []


async def test_a_missing_key_is_input_invalid(make_ws: MakeWriteSafe) -> None:
    ws, shop = make_ws(), Shop()
    submit = order_tool(ws, shop)
    with pytest.raises(WriteSafeError) as invalid:
        await submit({"sku": "A"})
    assert invalid.value.envelope.field == "idempotency_key"


async def test_expired_lease_hands_over_and_the_late_owner_is_fenced(
    make_ws: MakeWriteSafe,
) -> None:
    clock = ManualClock()
    ws = make_ws(clock=clock, lease_seconds=60)
    started, release = asyncio.Event(), asyncio.Event()
    executions = 0

    @ws.tool("zombie", timeout=None)
    async def zombie() -> str:
        nonlocal executions
        executions += 1
        started.set()
        await release.wait()
        return "late"

    other = make_ws(clock=clock, lease_seconds=60, wait_timeout=0.05).tool("zombie")(
        zombie.__wrapped__
    )
    owner = asyncio.create_task(zombie(idempotency_key="z"))
    await started.wait()
    with pytest.raises(WriteSafeError) as live:  # a first look: the lease is the owner's
        await other(idempotency_key="z")
    assert live.value.envelope.code == "IN_PROGRESS"
    # The owner's lease runs out (as if it had stalled or crashed): nothing renews it for a
    # whole lease, on the clock the ledger judges by (on SQLite: since the first look).
    clock.advance(61)
    if ws.keystore is not None:  # Redis keeps real time: let its lease run out as well
        await ws.keystore.redis.delete(ws.keystore.key("default", "z"))
    with pytest.raises(WriteSafeError) as taken_over:
        await other(idempotency_key="z")
    assert taken_over.value.envelope.code == "OUTCOME_UNKNOWN"

    release.set()
    with pytest.raises(WriteSafeError) as late:
        await owner
    assert late.value.envelope.code == "OUTCOME_UNKNOWN"
    status = await ws.status("z")
    assert status is not None
    assert status.status is Status.OUTCOME_UNKNOWN  # not overwritten by the late success
    assert status.result is None
    assert [a.outcome for a in status.attempts] == ["fenced"]
    assert executions == 1


async def test_lease_is_renewed_while_a_long_write_runs(make_ws: MakeWriteSafe) -> None:
    # 2 s, not 1: a renewal (every lease / 3) delayed past the fence (0.8 of the lease) by a
    # loaded machine ends the write for real, which is not what this test is about.
    lease = 2.0
    ws = make_ws(lease_seconds=lease, wait_timeout=0.1)
    release = asyncio.Event()

    @ws.tool("long", timeout=None)
    async def long() -> str:
        await release.wait()
        return "done"

    running = asyncio.create_task(long(idempotency_key="k"))
    await asyncio.sleep(lease * 2.5)  # two and a half lease lengths: only renewal keeps it
    other = make_ws(lease_seconds=lease, wait_timeout=0.1)
    other_long = other.tool("long")(long.__wrapped__)  # type: ignore[attr-defined]
    with pytest.raises(WriteSafeError) as waiting:
        await other_long(idempotency_key="k")
    assert waiting.value.envelope.code == "IN_PROGRESS"
    release.set()
    assert await running == "done"


async def test_user_errors_keep_their_code(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()

    @ws.tool("validate")
    async def validate(postcode: str) -> str:
        raise ToolError("INPUT_INVALID", "postcode is not served", field="postcode")

    with pytest.raises(WriteSafeError) as invalid:
        await validate("000000", idempotency_key="k")
    envelope = invalid.value.envelope
    assert (envelope.code, envelope.field, envelope.side_effects) == (
        "INPUT_INVALID",
        "postcode",
        "none",
    )
    status = await ws.status("k")
    assert status is not None
    assert status.status is Status.FAILED
