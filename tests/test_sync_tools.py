"""Sync tools (`@ws.tool` on a plain `def`) and `ws.sync`, on all three backends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.conftest import MakeWriteSafe
from tests.round_trips import count_round_trips
from writesafe import (
    Found,
    LookupOperation,
    NoCurrentOperation,
    NotFound,
    ResolutionRefused,
    Status,
    SyncTool,
    ToolError,
    WriteSafe,
    WriteSafeError,
)
from writesafe.idempotency._guard import Look
from writesafe.idempotency._keystore import RedisKeyStore
from writesafe.idempotency._store_answers import LeaseState

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.parametrize(
    "backend",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("postgres+redis", marks=[pytest.mark.postgres, pytest.mark.redis]),
    ],
)


def race(threads: int, call: Callable[[], Any]) -> list[Any]:
    """`call` from `threads` threads released at once; each one's result or `WriteSafeError`."""
    start = threading.Barrier(threads)
    answers: list[Any] = [None] * threads

    def run(index: int) -> None:
        start.wait()
        try:
            answers[index] = call()
        except WriteSafeError as error:
            answers[index] = error

    workers = [threading.Thread(target=run, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return answers


async def test_eight_threads_racing_one_key_cause_one_effect(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    effects: list[str] = []

    @ws.tool("submit_order")
    def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        effects.append(threading.current_thread().name)
        time.sleep(0.2)  # every duplicate arrives while the write runs
        return {"order_id": "o-1", **order}

    answers = await asyncio.to_thread(
        race, 8, lambda: submit_order({"sku": "A1"}, idempotency_key="ord-1")
    )

    assert answers == [{"order_id": "o-1", "sku": "A1"}] * 8
    assert len(effects) == 1
    status = await ws.status("ord-1")
    assert status is not None
    assert (status.status, status.executions) == (Status.SUCCEEDED, 1)


def race_processes(work: Path, options: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """`count` worker processes released at once on one key; each one's answer."""
    config = {"work": str(work), "writesafe": options, "key": "race", "hold_seconds": 0.5}
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.sync_race_worker", json.dumps(config)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        for _ in range(count)
    ]
    while len(list(work.glob("ready-*"))) < count:  # every worker imported and connected
        assert all(worker.poll() is None for worker in workers)
        time.sleep(0.05)
    (work / "go").touch()
    outputs = [worker.communicate(timeout=60)[0] for worker in workers]
    assert all(worker.returncode == 0 for worker in workers), outputs
    return [json.loads(output.strip().splitlines()[-1]) for output in outputs]


@pytest.mark.slow
async def test_eight_processes_racing_one_key_cause_one_effect(
    tmp_path: Path, store_options: dict[str, Any], make_ws: MakeWriteSafe
) -> None:
    await make_ws(auto_migrate=True).start()

    answers = await asyncio.to_thread(race_processes, tmp_path, store_options, 8)

    assert (tmp_path / "effects").read_text().count("\n") == 1
    assert len({json.dumps(answer, sort_keys=True) for answer in answers}) == 1, answers
    assert "result" in answers[0]


async def test_a_sync_write_timing_out_after_its_effect_is_looked_up_before_any_replay(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    effects: list[dict[str, Any]] = []
    looked_up: list[int] = []

    def find_order(operation: LookupOperation) -> Found | NotFound:
        looked_up.append(len(effects))
        return Found(effects[0]) if effects else NotFound()

    @ws.tool("slow_order", timeout=0.2, lookup=find_order)
    def slow_order(order: dict[str, Any]) -> dict[str, Any]:
        effects.append({"order_id": "o-1", **order})  # the shop commits...
        time.sleep(0.6)  # ...and the answer comes too late
        return effects[-1]

    with pytest.raises(WriteSafeError) as first:
        await asyncio.to_thread(slow_order, {"sku": "B"}, idempotency_key="ord-8")
    envelope = first.value.envelope
    assert (envelope.code, envelope.side_effects, envelope.next_action) == (
        "OUTCOME_UNKNOWN",
        "unknown",
        "reconcile",
    )
    unknown = await asyncio.to_thread(ws.sync.status, "ord-8")
    assert unknown is not None
    assert unknown.status is Status.OUTCOME_UNKNOWN
    assert looked_up == []

    again = await asyncio.to_thread(slow_order.invoke, ({"sku": "B"},), {}, key="ord-8")

    assert (again.value, again.replayed) == ({"order_id": "o-1", "sku": "B"}, True)
    assert looked_up == [1]  # the lookup ran, and found the one effect, before answering
    assert len(effects) == 1
    settled = await ws.status("ord-8")
    assert settled is not None
    assert (settled.status, settled.executions) == (Status.SUCCEEDED, 1)


class Failures:
    """The same failures written once as `async def` and once as plain `def`."""

    @staticmethod
    async def invalid_async(postcode: str) -> str:
        raise ToolError("INPUT_INVALID", "postcode is not served", field="postcode")

    @staticmethod
    def invalid_sync(postcode: str) -> str:
        raise ToolError("INPUT_INVALID", "postcode is not served", field="postcode")

    @staticmethod
    async def busy_async(postcode: str) -> str:
        raise ToolError("DEPENDENCY_BUSY", "try later", retry_after_ms=10)

    @staticmethod
    def busy_sync(postcode: str) -> str:
        raise ToolError("DEPENDENCY_BUSY", "try later", retry_after_ms=10)

    @staticmethod
    async def broken_async(postcode: str) -> str:
        raise KeyError("surprise")

    @staticmethod
    def broken_sync(postcode: str) -> str:
        raise KeyError("surprise")

    @staticmethod
    async def slow_async(postcode: str) -> str:
        await asyncio.sleep(0.5)
        return postcode

    @staticmethod
    def slow_sync(postcode: str) -> str:
        time.sleep(0.5)
        return postcode

    @staticmethod
    async def fine_async(postcode: str) -> str:
        return postcode

    @staticmethod
    def fine_sync(postcode: str) -> str:
        return postcode


async def test_sync_and_async_paths_give_identical_envelopes(make_ws: MakeWriteSafe) -> None:
    async_ws, sync_ws = make_ws(), make_ws()  # two workers on the same stores

    def tools(name: str) -> tuple[Any, SyncTool[Any]]:
        options: dict[str, Any] = {"timeout": 0.2, "max_executions": 2}
        return (
            async_ws.tool(name, **options)(getattr(Failures, f"{name}_async")),
            sync_ws.tool(name, **options)(getattr(Failures, f"{name}_sync")),
        )

    async def envelopes(name: str, *calls: tuple[str, str | None]) -> None:
        async_tool, sync_tool = tools(name)
        for postcode, key in calls:
            # The same key in two scopes: the envelopes (which name no scope) must be equal.
            with pytest.raises(WriteSafeError) as from_async:
                await async_tool(postcode, idempotency_key=key, scope="async")
            with pytest.raises(WriteSafeError) as from_sync:
                await asyncio.to_thread(sync_tool, postcode, idempotency_key=key, scope="sync")
            expected = from_async.value.envelope.model_dump(mode="json")
            assert from_sync.value.envelope.model_dump(mode="json") == expected, name

    await envelopes("invalid", ("000000", "k1"), ("000000", "k1"))  # failure, stored failure
    await envelopes("busy", ("560001", "k2"))  # retried once, then RETRY_EXHAUSTED
    await envelopes("broken", ("560001", "k3"), ("560001", "k3"))  # UNKNOWN_ERROR, terminal
    await envelopes("slow", ("560001", "k4"), ("999999", "k4"))  # OUTCOME_UNKNOWN, KEY_REUSED
    await envelopes("fine", ("560001", None), ("560001", "bad\nkey"))  # INPUT_INVALID


async def test_a_sync_tool_called_inside_a_running_loop_blocks_it_and_works(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()

    @ws.tool("echo")
    def echo(text: str) -> str:
        return text

    assert echo("a", idempotency_key="k") == "a"  # on this test's loop thread, which waits
    # Its async face (what `ws.tools` holds) runs the function in a worker thread.
    assert await ws.tools["echo"]("a", idempotency_key="k") == "a"
    assert await ws.tools["echo"]("b", idempotency_key="k2") == "b"
    assert (await ws.status("k2")) is not None


async def test_sync_status_reconcile_and_resolve(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()

    def find(operation: LookupOperation) -> Found:
        return Found("late")

    @ws.tool("late", timeout=0.1, lookup=find, settle_after=0)
    def late() -> str:
        time.sleep(0.3)
        return "late"

    with pytest.raises(WriteSafeError):
        await asyncio.to_thread(late, idempotency_key="k")

    def settle() -> tuple[Any, Any]:
        report = ws.sync.reconcile()
        with pytest.raises(ResolutionRefused):  # only needs_attention is an operator's to settle
            ws.sync.resolve("k", outcome="failed", reason="gone", actor="ops")
        return report, ws.sync.status("k")

    report, status = await asyncio.to_thread(settle)
    assert (report.examined, report.found) == (1, 1)
    assert status is not None
    assert status.status is Status.SUCCEEDED
    assert await asyncio.to_thread(ws.sync.status, "never") is None


# Forking a process that has threads is what this test is about; Python 3.12 warns of it.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
async def test_a_forked_child_starts_its_own_loop_thread(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()

    @ws.tool("pid")
    def pid(n: int) -> int:
        return os.getpid()

    parent = os.getpid()
    assert await asyncio.to_thread(pid, 1, idempotency_key="parent") == parent

    def fork_and_call() -> int:
        child = os.fork()
        if child == 0:  # the child: its parent's loop thread did not come along
            code = 0 if pid(2, idempotency_key="child") == os.getpid() else 1
            os._exit(code)
        return os.waitpid(child, 0)[1]

    assert await asyncio.to_thread(fork_and_call) == 0
    # The parent's thread and stores are untouched: its replay still answers.
    assert await asyncio.to_thread(pid, 1, idempotency_key="parent") == parent
    status = await asyncio.to_thread(ws.sync.status, "child")
    assert status is not None
    assert status.status is Status.SUCCEEDED


async def test_a_sync_write_sees_its_operation_and_fence_on_the_calling_thread(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    seen: list[tuple[str, str, int]] = []

    @ws.tool("fenced")
    def fenced() -> str:
        operation = ws.current_operation()
        operation.fence()  # admitted: the lease is fresh
        seen.append((threading.current_thread().name, operation.key, operation.fencing_token))
        return "sent"

    def call() -> str:
        return fenced(idempotency_key="f-1")

    caller = threading.Thread(target=call, name="the-caller")
    caller.start()
    await asyncio.to_thread(caller.join)

    assert seen == [("the-caller", "f-1", 1)]
    with pytest.raises(NoCurrentOperation):  # nothing leaks out of the write
        ws.current_operation()


async def test_an_interrupt_inside_a_sync_write_records_outcome_unknown(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    effects: list[str] = []

    @ws.tool("interrupted")
    def interrupted() -> str:
        effects.append("sent")
        raise KeyboardInterrupt  # Ctrl-C in the middle of the write

    def call() -> None:
        with pytest.raises(KeyboardInterrupt):
            interrupted(idempotency_key="ctrl-c")

    await asyncio.to_thread(call)

    async def recorded() -> Any:
        for _ in range(200):
            status = await ws.status("ctrl-c")
            if status is not None and status.status is not Status.IN_FLIGHT:
                return status
            await asyncio.sleep(0.05)
        return status

    status = await recorded()
    assert status is not None
    assert status.status is Status.OUTCOME_UNKNOWN  # not left in flight, never "failed"
    with pytest.raises(WriteSafeError) as again:
        await asyncio.to_thread(interrupted, idempotency_key="ctrl-c")
    assert again.value.envelope.code == "OUTCOME_UNKNOWN"  # no lookup: never run again
    assert effects == ["sent"]


async def test_closing_the_sync_face_ends_a_call_still_running(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    release = threading.Event()

    @ws.tool("held")
    def held() -> str:
        release.wait(30)
        return "late"

    outcome: list[BaseException | str] = []

    def call() -> None:
        try:
            outcome.append(held(idempotency_key="held"))
        except BaseException as error:  # whatever it is, the caller must not hang
            outcome.append(error)

    caller = threading.Thread(target=call)
    caller.start()
    while (await ws.status("held")) is None:  # noqa: ASYNC110 (the stores, not an event)
        await asyncio.sleep(0.02)
    closing = asyncio.create_task(asyncio.to_thread(ws.sync.close))
    while True:  # until the cancelled call has recorded what it knows
        status = await ws.status("held")
        if status is not None and status.status is not Status.IN_FLIGHT:
            break
        await asyncio.sleep(0.02)
    release.set()
    await closing
    await asyncio.to_thread(caller.join, 30)

    assert not caller.is_alive()
    assert len(outcome) == 1
    assert not isinstance(outcome[0], str)  # the late result is not taken as an answer
    status = await ws.status("held")
    assert status is not None
    assert status.status is Status.OUTCOME_UNKNOWN


async def test_a_call_whose_task_is_cancelled_before_its_first_step_does_not_hang(
    make_ws: MakeWriteSafe,
) -> None:
    # A call's task hands its caller the answer from within its own steps; one cancelled by the
    # close before its first step has none, and its caller is told by the close instead.
    ws = make_ws()
    ws.sync.start()
    loop_thread = ws.sync._loop_thread()
    go = threading.Event()
    loop_thread._loop.call_soon_threadsafe(go.wait, 30)  # the loop holds still meanwhile
    closing = threading.Thread(target=ws.sync.close)
    closing.start()  # queues the close's first step ...
    await asyncio.sleep(0.3)
    outcome: list[BaseException | str] = []

    def call() -> None:
        try:
            outcome.append(loop_thread.run(lambda: asyncio.sleep(0, "ran")))
        except BaseException as error:
            outcome.append(error)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()  # ... before the call's start: the close cancels a task not yet stepped
    await asyncio.sleep(0.3)
    go.set()
    await asyncio.to_thread(closing.join, 30)
    await asyncio.to_thread(caller.join, 10)

    assert not caller.is_alive(), "the caller must not wait forever on a loop that stopped"
    assert len(outcome) == 1
    assert isinstance(outcome[0], asyncio.CancelledError)


async def test_a_sync_call_from_its_own_loop_thread_is_refused_not_deadlocked(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    refusals: list[str] = []

    @ws.tool("inner")
    def inner() -> str:
        return "inner"

    async def find(operation: LookupOperation) -> Found:
        try:
            inner(idempotency_key="from-the-lookup")  # on the sync face's loop thread
        except RuntimeError as refused:
            refusals.append(str(refused))
        return Found("late")

    @ws.tool("outer", timeout=0.1, lookup=find, settle_after=0)
    def outer() -> str:
        time.sleep(0.3)
        return "late"

    with pytest.raises(WriteSafeError):
        await asyncio.to_thread(outer, idempotency_key="k")
    assert await asyncio.to_thread(outer, idempotency_key="k") == "late"  # the lookup ran

    assert refusals == ["a sync writesafe call cannot be made from its own loop thread"]


def calls_answered(tool: str, answer: str) -> float:
    labels = {"tool": tool, "answer": answer}
    return REGISTRY.get_sample_value("writesafe_calls_total", labels) or 0.0


def flush_cache_fills(ws: WriteSafe) -> None:
    """Wait for the Redis copies the sync face's guard writes behind its answers."""
    ws.sync._run(lambda twin: twin._guard.flush())


async def test_a_finished_key_is_answered_on_the_calling_thread(
    backend: str, make_ws: MakeWriteSafe
) -> None:
    """Where the guard's first look needs no round trip of the loop's (Redis's claim, sent on a
    blocking socket; the embedded ledger's local read), a finished key's replay and a reuse of
    its key are answered without the loop thread."""
    if backend == "postgres":
        pytest.skip("PostgreSQL alone has no read without a round trip: the loop thread reads")
    ws = make_ws()
    effects: list[int] = []

    @ws.tool("charge")
    def charge(cents: int) -> dict[str, int]:
        effects.append(cents)
        return {"cents": cents}

    assert await asyncio.to_thread(charge, 100, idempotency_key="c-1") == {"cents": 100}
    await asyncio.to_thread(flush_cache_fills, ws)
    replayed, reused = calls_answered("charge", "replayed"), calls_answered("charge", "KEY_REUSED")

    # The loop thread is held: only an answer made on the calling thread can come back.
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(30)

    ws.sync._loop_thread()._loop.call_soon_threadsafe(hold)
    assert held.wait(5)
    try:
        answer = await asyncio.wait_for(
            asyncio.to_thread(charge.invoke, (100,), {}, key="c-1"), timeout=5
        )
        with pytest.raises(WriteSafeError) as refused:
            await asyncio.wait_for(asyncio.to_thread(charge, 999, idempotency_key="c-1"), 5)
    finally:
        release.set()
    assert (answer.value, answer.replayed) == ({"cents": 100}, True)
    assert refused.value.envelope.code == "KEY_REUSED"
    # Counted as the guard counts its answers.
    assert calls_answered("charge", "replayed") == replayed + 1
    assert calls_answered("charge", "KEY_REUSED") == reused + 1
    assert effects == [100]


async def test_a_sync_first_execution_makes_the_round_trips_of_the_async_one(
    backend: str, make_ws: MakeWriteSafe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease claimed on the calling thread is the one the guard goes on from: no second
    claim on the loop thread (the async path's count: `test_guard.py`)."""
    if backend != "postgres+redis":
        pytest.skip("counted where both stores are servers")
    ws = make_ws()

    @ws.tool("charge")
    def charge(cents: int) -> int:
        return cents

    await asyncio.to_thread(ws.sync.start)
    sent = count_round_trips(ws.sync._loop_thread().twin.ledger.engine, monkeypatch)

    assert await asyncio.to_thread(charge, 100, idempotency_key="c-1") == 100
    await asyncio.to_thread(flush_cache_fills, ws)
    assert sent == ["redis", "ledger", "ledger", "redis"]  # lease, intent, outcome, copy

    sent.clear()
    assert await asyncio.to_thread(charge, 100, idempotency_key="c-1") == 100
    assert sent == ["redis"]  # the replay: the claim finds the copy


async def test_a_look_holding_the_lease_lets_it_go_to_the_call_leading_its_key(
    backend: str, make_ws: MakeWriteSafe
) -> None:
    """Two sync calls of one key in one process may reach the loop thread in another order than
    their looks reached Redis. The one whose look took the lease then follows the one leading,
    so it lets the lease go; kept, the leader would poll its own process's lease until its wait
    ran out (IN_PROGRESS)."""
    if backend != "postgres+redis":
        pytest.skip("only a Redis look takes a lease")
    ws = make_ws()
    effects: list[int] = []

    @ws.tool("charge")
    def charge(cents: int) -> int:
        effects.append(cents)
        return cents

    await asyncio.to_thread(ws.sync.start)
    loop_thread = ws.sync._loop_thread()
    twin = loop_thread.twin
    guard = twin.started_guard
    assert guard is not None
    call = charge.tool.prepare((100,), {}, "c-1", "default", None)
    holding, busy = guard.look_now(call), guard.look_now(call)
    states = [
        None if look is None or look.store is None else look.store.state for look in (holding, busy)
    ]
    assert states == [LeaseState.ACQUIRED, LeaseState.BUSY]
    assert holding is not None
    assert busy is not None

    def run(look: Look) -> Any:
        return loop_thread.run(lambda: charge.tool.run(call, through=twin, look=look))

    leading = asyncio.ensure_future(asyncio.to_thread(run, busy))
    await asyncio.sleep(0.2)  # it leads, and polls the lease the other look holds
    following = asyncio.ensure_future(asyncio.to_thread(run, holding))
    answers = await asyncio.gather(leading, following, return_exceptions=True)

    assert not [a for a in answers if isinstance(a, BaseException)], answers
    assert [(a.value, a.replayed) for a in answers] == [(100, False), (100, True)]
    assert effects == [100]


def open_files(path: Path) -> int:
    """How many file descriptors of this process are open on `path`."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            count += fd.readlink() == path
    return count


async def test_a_thread_per_request_keeps_no_read_connection_per_thread(
    backend: str, make_ws: MakeWriteSafe
) -> None:
    """A server that makes a thread per request (Django's runserver) reads the embedded ledger
    on each one: the read connections are reused, not left open one per finished thread."""
    if backend != "sqlite":
        pytest.skip("only the embedded ledger reads on the calling thread")
    ws = make_ws()

    @ws.tool("charge")
    def charge(cents: int) -> int:
        return cents

    def request() -> None:
        worker = threading.Thread(target=charge, args=(100,), kwargs={"idempotency_key": "c-1"})
        worker.start()
        worker.join()

    await asyncio.to_thread(request)
    ledger = ws.ledger.file
    assert ledger is not None
    opened = open_files(ledger)
    for _ in range(20):
        await asyncio.to_thread(request)

    assert open_files(ledger) <= opened + 1


async def test_a_sync_replay_with_redis_down_is_the_ledgers(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(redis_url="redis://127.0.0.1:1/0", redis_prefix="ws-test-down")  # nothing there
    effects: list[int] = []

    @ws.tool("charge")
    def charge(cents: int) -> int:
        effects.append(cents)
        return cents

    first = await asyncio.to_thread(charge.invoke, (100,), {}, key="c-1")
    again = await asyncio.to_thread(charge.invoke, (100,), {}, key="c-1")

    assert (first.replayed, again.replayed, again.value) == (False, True, 100)
    assert effects == [100]
    # The calling thread's claim degrades as the loop's commands do: no lease, the breaker open.
    store = RedisKeyStore("redis://127.0.0.1:1/0", prefix="ws-test-down")  # its breaker closed
    claim = await asyncio.to_thread(store.claim_now, "default", "c-1", "owner/print", 1.0)
    assert claim.state is LeaseState.UNAVAILABLE
    assert not store.available
    await store.close()
