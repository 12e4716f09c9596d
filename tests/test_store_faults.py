"""Store faults: the ledger or Redis failing before, during and after a write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from tests.conftest import PG_URL, REDIS_URL, MakeWriteSafe
from tests.redis_server import available, private_redis
from writesafe import Status, Tool, WriteSafe, WriteSafeError
from writesafe.idempotency._keystore import RedisKeyStore
from writesafe.idempotency._redis_connections import pack
from writesafe.idempotency._store_answers import CachedOutcome, LeaseState
from writesafe.ledger import ManualClock
from writesafe.ledger._pg_writer import PostgresWriter

needs_redis_server = pytest.mark.skipif(not available(), reason="needs redis-server")


def echo_tool(ws: WriteSafe) -> tuple[Tool[int], list[int]]:
    """A tool that returns its argument, and the list of its executions (its effects)."""
    effects: list[int] = []

    @ws.tool("submit")
    async def submit(n: int) -> int:
        effects.append(n)
        return n

    return submit, effects


def _table(ws: WriteSafe, name: str) -> str:
    schema = ws.settings.db_schema
    return name if schema is None else f'"{schema}".{name}'


async def _hide_ledger(ws: WriteSafe) -> None:
    """A real store fault: every ledger statement on operations fails until restored (a table
    that is not there: the ledger calls that a misconfiguration)."""
    async with ws.ledger.engine.begin() as connection:
        operations = _table(ws, "writesafe_operations")
        await connection.execute(
            text(f"ALTER TABLE {operations} RENAME TO writesafe_operations_away")
        )


async def _restore_ledger(ws: WriteSafe) -> None:
    async with ws.ledger.engine.begin() as connection:
        away = _table(ws, "writesafe_operations_away")
        await connection.execute(text(f"ALTER TABLE {away} RENAME TO writesafe_operations"))


async def test_unreachable_ledger_means_the_write_never_starts() -> None:
    ws = WriteSafe("postgresql+asyncpg://postgres@127.0.0.1:1/test", auto_migrate=True)
    executions = 0

    @ws.tool("submit")
    async def submit() -> None:
        nonlocal executions
        executions += 1

    try:
        with pytest.raises(WriteSafeError) as unavailable:
            await submit(idempotency_key="k")
    finally:
        await ws.close()
    envelope = unavailable.value.envelope
    assert envelope.code == "TEMP_UNAVAILABLE"
    assert envelope.side_effects == "none"
    assert envelope.retryable is True
    assert executions == 0


async def test_ledger_lost_between_start_and_claim_fails_closed(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    submit, effects = echo_tool(ws)

    await submit(1, idempotency_key="warm-up")
    await _hide_ledger(ws)
    try:
        with pytest.raises(WriteSafeError) as unavailable:
            await submit(2, idempotency_key="k")
    finally:
        await _restore_ledger(ws)
    # Not an outage that a retry rides out: a person must look (nothing was sent).
    assert unavailable.value.envelope.code == "UNKNOWN_ERROR"
    assert unavailable.value.envelope.cause == "ledger_misconfigured"
    assert len(effects) == 1
    assert await ws.status("k") is None


async def test_ledger_lost_after_the_effect_is_outcome_unknown_not_a_retry_invitation(
    make_ws: MakeWriteSafe,
) -> None:
    clock = ManualClock()
    ws = make_ws(clock=clock, lease_seconds=30, wait_timeout=0)
    shop: list[int] = []

    @ws.tool("submit")
    async def submit(n: int) -> int:
        shop.append(n)
        await _hide_ledger(ws)  # the ledger goes away while the effect is committed
        return n

    with pytest.raises(WriteSafeError) as lost:
        await submit(1, idempotency_key="k")
    await _restore_ledger(ws)
    assert lost.value.envelope.code == "OUTCOME_UNKNOWN"
    assert lost.value.envelope.side_effects == "unknown"
    status = await ws.status("k")
    assert status is not None
    assert status.status is Status.IN_FLIGHT  # its lease hands it to reconciliation
    assert status.lease_expires_at is not None
    with pytest.raises(WriteSafeError) as live:  # a first look: its lease still runs
        await submit(1, idempotency_key="k")
    assert live.value.envelope.code == "IN_PROGRESS"

    clock.advance(31)
    if ws.keystore is not None:  # Redis keeps real time: let its lease run out too
        await ws.keystore.redis.delete(ws.keystore.key("default", "k"))
    with pytest.raises(WriteSafeError) as retry:
        await submit(1, idempotency_key="k")
    assert retry.value.envelope.code == "OUTCOME_UNKNOWN"
    assert shop == [1]


async def test_a_brief_ledger_outage_after_the_effect_is_ridden_out(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    restored: list[asyncio.Task[None]] = []

    @ws.tool("submit")
    async def submit(n: int) -> int:
        await _hide_ledger(ws)

        async def restore_soon() -> None:
            await asyncio.sleep(0.3)
            await _restore_ledger(ws)

        restored.append(asyncio.create_task(restore_soon()))
        return n

    assert await submit(5, idempotency_key="k") == 5
    await restored[0]
    status = await ws.status("k")
    assert status is not None
    assert status.status is Status.SUCCEEDED


async def test_an_outcome_whose_answer_was_lost_after_its_commit_is_taken_on_the_retry(
    make_ws: MakeWriteSafe,
) -> None:
    """The outcome's write committed, then its answer was lost (the connection dropped after
    the commit): the retry finds the row moved on, and takes it as this finish's own, not as a
    lease taken over."""
    ws = make_ws()
    submit, effects = echo_tool(ws)
    finish = ws.ledger.finish
    answers_lost: list[int] = []

    async def answer_lost_once(*args: Any, **kwargs: Any) -> Any:
        recorded = await finish(*args, **kwargs)
        if not answers_lost:
            answers_lost.append(1)
            raise OperationalError("UPDATE …", {}, Exception("connection closed after the commit"))
        return recorded

    ws.ledger.finish = answer_lost_once  # type: ignore[method-assign]
    assert await submit(3, idempotency_key="k") == 3
    assert answers_lost == [1]
    status = await ws.status("k")
    assert status is not None
    assert status.status is Status.SUCCEEDED
    assert await submit(3, idempotency_key="k") == 3  # a replay
    assert effects == [3]


@pytest.mark.parametrize("backend", ["postgres+redis"])
async def test_losing_every_redis_key_never_causes_a_second_execution(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    assert ws.keystore is not None
    submit, effects = echo_tool(ws)

    assert await submit(7, idempotency_key="k") == 7
    # A second call waits for the cache write that runs behind the first one's answer.
    assert await submit(7, idempotency_key="k") == 7
    redis = ws.keystore.redis
    keys = [key async for key in redis.scan_iter(match=f"{ws.keystore.prefix}:*")]
    assert keys, "the finished operation was cached"
    await redis.delete(*keys)
    assert await submit(7, idempotency_key="k") == 7
    assert len(effects) == 1
    refreshed = [key async for key in redis.scan_iter(match=f"{ws.keystore.prefix}:*")]
    assert refreshed, "the replay from the ledger refilled the cache"


@pytest.mark.parametrize("backend", ["postgres+redis"])
async def test_a_cached_replay_and_a_reuse_answer_from_redis(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    submit, effects = echo_tool(ws)

    await submit(1, idempotency_key="k")
    await _hide_ledger(ws)  # from here on only Redis can answer
    try:
        assert await submit(1, idempotency_key="k") == 1
        with pytest.raises(WriteSafeError) as reused:
            await submit(2, idempotency_key="k")
    finally:
        await _restore_ledger(ws)
    assert reused.value.envelope.code == "KEY_REUSED"
    assert reused.value.envelope.operation is not None
    assert reused.value.envelope.operation.status == "succeeded"
    assert len(effects) == 1


def _degraded() -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name == "writesafe_store_degraded":
            total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return total


async def test_unreachable_redis_degrades_to_the_ledger(
    pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = _degraded()
    ws = WriteSafe(PG_URL, "redis://127.0.0.1:1/0", schema=pg_schema, auto_migrate=True)
    submit, effects = echo_tool(ws)

    try:
        assert await submit(3, idempotency_key="k") == 3
        assert await submit(3, idempotency_key="k") == 3
    finally:
        await ws.close()
    assert len(effects) == 1
    assert _degraded() > before
    assert "redis unavailable" in caplog.text


async def test_sqlite_default_needs_no_server(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("WRITESAFE_REDIS_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    async with WriteSafe() as ws:  # the embedded default: ./writesafe.db, no Redis

        @ws.tool("submit")
        async def submit(n: int) -> int:
            return n

        assert await submit(4, idempotency_key="k") == 4
        assert ws.keystore is None
    assert (tmp_path / "writesafe.db").exists()


@pytest.mark.parametrize("backend", ["postgres"])
async def test_terminated_ledger_connections_are_replaced_without_failing_a_call(
    make_ws: MakeWriteSafe,
) -> None:
    """A restarted server or `pg_terminate_backend` kills every idle connection of the guard's
    writer at once; the next call must neither fail nor execute twice."""
    ws = make_ws()
    submit, effects = echo_tool(ws)
    await asyncio.gather(*(submit(n, idempotency_key=f"warm-{n}") for n in range(4)))
    writer = ws.ledger.writer
    assert isinstance(writer, PostgresWriter)
    pids = [connection.get_server_pid() for _, connection in writer._pool._idle]
    assert pids, "the warm-up left idle connections"
    await _terminate_backends(pids)

    assert await submit(100, idempotency_key="after") == 100
    assert await submit(0, idempotency_key="warm-0") == 0  # a replay, not a second effect
    assert sorted(effects) == [0, 1, 2, 3, 100]


async def _terminate_backends(pids: list[int]) -> None:
    connection = await asyncpg.connect(PG_URL.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await connection.execute(
            "SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) pid", pids
        )
    finally:
        await connection.close()


@needs_redis_server
async def test_a_burst_beyond_the_redis_pool_queues_instead_of_degrading() -> None:
    """More concurrent calls than Redis connections wait for one: a burst must not look like
    an outage and switch Redis off for the breaker's interval. A Redis of the test's own stalls
    writes for 100 ms (`CLIENT PAUSE … WRITE`) so that the burst really holds every connection
    at once."""
    before = _degraded()
    with private_redis() as url:
        store = RedisKeyStore(url, max_connections=5, socket_timeout=5.0)
        try:
            await store.redis.execute_command("CLIENT", "PAUSE", 100, "WRITE")
            claims = await asyncio.gather(
                *(store.claim("default", f"b{n}", f"owner-{n}/f", 15) for n in range(40))
            )
        finally:
            await store.close()
    assert {claim.state for claim in claims} == {LeaseState.ACQUIRED}
    assert _degraded() == before
    assert store.available


@pytest.mark.parametrize("backend", ["postgres+redis"])
async def test_an_unreadable_redis_value_falls_back_to_the_ledger(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    assert ws.keystore is not None
    submit, effects = echo_tool(ws)
    assert await submit(5, idempotency_key="k") == 5
    await ws.keystore.redis.set(ws.keystore.key("default", "k"), b"O:\xff not an outcome")
    assert await submit(5, idempotency_key="k") == 5  # replayed from the ledger
    assert effects == [5]


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_refused_ledger_connection_is_a_typed_failure(make_ws: MakeWriteSafe) -> None:
    """The server refusing a new connection for a database it does not have is a
    misconfiguration, not an outage: a typed refusal before the write, never a raw driver
    error, and no invitation to retry."""
    ws = make_ws()
    submit, effects = echo_tool(ws)
    await ws.start()
    writer = ws.ledger.writer
    assert isinstance(writer, PostgresWriter)
    writer._pool._connect["database"] = "writesafe_no_such_database"  # refused at connect
    with pytest.raises(WriteSafeError) as refused:
        await submit(1, idempotency_key="k")
    envelope = refused.value.envelope
    assert (envelope.code, envelope.cause, envelope.retryable) == (
        "UNKNOWN_ERROR",
        "ledger_misconfigured",
        False,
    )
    assert effects == []


async def test_a_redis_connection_closed_by_the_server_is_replaced_without_degrading(
    redis_prefix: str,
) -> None:
    """A Redis restart (here: the server killing the store's connection) leaves stale idle
    connections behind; the next claim is sent again on a new one instead of switching Redis
    off for the breaker's interval."""
    store = RedisKeyStore(REDIS_URL, prefix=redis_prefix)
    before = _degraded()
    try:
        assert (await store.claim("default", "a", "owner-a/f", 15)).state is LeaseState.ACQUIRED
        client_id = await store._hot.execute(pack(b"CLIENT", b"ID"))
        assert await store.redis.execute_command("CLIENT", "KILL", "ID", client_id) == 1
        claim = await store.claim("default", "b", "owner-b/f", 15)
    finally:
        await store.close()
    assert claim.state is LeaseState.ACQUIRED
    assert _degraded() == before
    assert store.available


async def test_a_claim_sent_again_after_it_landed_holds_the_lease(redis_prefix: str) -> None:
    """A claim whose reply was lost and that was sent again finds its own lease: it holds the
    key, rather than waiting for itself as for a busy duplicate."""
    store = RedisKeyStore(REDIS_URL, prefix=redis_prefix)
    try:
        await store.redis.set(store.key("default", "k"), "L:owner-1/f")  # the first send landed
        again = await store.claim("default", "k", "owner-1/f", 15)
        other = await store.claim("default", "k", "owner-2/f", 15)
    finally:
        await store.close()
    assert again.state is LeaseState.ACQUIRED
    assert (other.state, other.holder) == (LeaseState.BUSY, "owner-1/f")


@needs_redis_server
async def test_a_redis_reply_that_came_too_late_is_never_read_as_the_next_ones() -> None:
    """A command that timed out may still be answered later; its connection must not carry
    that late reply to the next command (a claim would read another key's answer). A Redis of
    the test's own holds every client for 1.5 s (`CLIENT PAUSE … ALL`) while the store waits
    0.5 s for the claim; the next claim goes once the held commands are answered (a fixed sleep
    for the pause's end timed it out once on a loaded machine)."""
    outcome = CachedOutcome("f" * 64, "submit", 1, 3, "5")
    with private_redis() as url:
        store = RedisKeyStore(url, socket_timeout=0.5, breaker_seconds=0)
        try:
            await store.cache("default", "done", outcome)
            async with Redis.from_url(url) as admin:  # the store's short timeout is for claims
                await admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")
            stalled = await store.claim("default", "other", "owner-a/f", 15)
            async with Redis.from_url(url) as admin:
                # Held behind the stalled claim, and answered after it: its late reply is sent.
                await admin.ping()
            claim = await store.claim("default", "done", "owner-b/f", 15)
        finally:
            await store.close()
    assert stalled.state is LeaseState.UNAVAILABLE
    assert (claim.state, claim.outcome) == (LeaseState.CACHED, outcome)


async def test_a_fill_queued_as_redis_fails_is_given_up_not_waited_for() -> None:
    """Another command opens the breaker between a fill's queueing and its send: the breaker
    skips the send, and the fill is given up (closing waits for fills)."""
    store = RedisKeyStore("redis://127.0.0.1:1/0", socket_timeout=0.2)
    outcome = CachedOutcome("f" * 64, "submit", 1, 3, "5")
    try:
        fill = store.cache("default", "k", outcome)
        assert store.claim_now("default", "other", "owner/f", 15).state is LeaseState.UNAVAILABLE
        await asyncio.wait_for(fill, timeout=2)
    finally:
        await store.close()
