"""The fence is checked again as a request is written, not only when the transport first sees it.

A request can wait between the two — for a pooled connection, or in a thread the scheduler (or a
SIGSTOP) has paused — and its lease can be taken over meanwhile. A sync write's thread cannot be
cancelled when its lease is lost, so only the check at the write stops such a request.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.conftest import MakeWriteSafe
from tests.test_fence import ORDER, call_as_a_client_would
from writesafe import (
    Found,
    LookupOperation,
    NotFound,
    Status,
    SyncFencedTransport,
    WriteSafe,
    WriteSafeError,
)

LEASE = 1.0
SETTLE = 0.5
KEY = "ord-waits"


class _Orders(BaseHTTPRequestHandler):
    """Records the fencing token of every order request that reaches it."""

    received: list[str]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.received.append(self.headers.get("Fencing-Token", ""))
        body = b'{"order_id": "o-1"}'
        self.send_response(201)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        """Quiet: the test reads `received`, not the log."""


@pytest.fixture
def orders() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server in a thread of its own; its URL and the tokens it received."""
    received: list[str] = []
    handler = type("Orders", (_Orders,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _WaitsOnce(httpx.HTTPTransport):
    """httpx's transport, under the fenced one: the first request waits (after the fenced
    transport admitted it) until the test lets it go."""

    def __init__(self, waiting: threading.Event, go: threading.Event) -> None:
        super().__init__()
        self._waiting, self._go = waiting, go

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not self._waiting.is_set():
            self._waiting.set()
            assert self._go.wait(30)
        return super().handle_request(request)


async def test_a_sync_request_whose_lease_was_taken_while_it_waited_is_not_sent(
    make_ws: MakeWriteSafe, orders: tuple[str, list[str]]
) -> None:
    url, received = orders
    waiting, go = threading.Event(), threading.Event()
    transport = SyncFencedTransport(_WaitsOnce(waiting, go))
    ws = make_ws(lease_seconds=LEASE)
    other = make_ws(lease_seconds=LEASE)  # another worker, meeting the first in the stores

    with httpx.Client(transport=transport, base_url=url) as client:

        @ws.tool("submit_order", timeout=None, max_executions=1)
        def submit_order(order: dict[str, Any]) -> dict[str, Any]:
            response = client.post("/orders", json=order)
            response.raise_for_status()
            result: dict[str, Any] = response.json()
            return result

        sending = asyncio.to_thread(submit_order, ORDER, idempotency_key=KEY)
        call = asyncio.create_task(sending)
        assert await asyncio.to_thread(waiting.wait, 30)
        # While the request waits, the operation is taken from its writer.
        row = await other.ledger.get("default", KEY)
        assert row is not None
        assert row.status is Status.IN_FLIGHT
        assert await other.ledger.transition(row, Status.OUTCOME_UNKNOWN, lease_owner=None)
        await asyncio.sleep(LEASE)  # a renewal tick: refused, the fence is revoked
        go.set()
        with pytest.raises(WriteSafeError) as raised:
            await call

    assert received == [], "the request was written after its lease was taken"
    # The guard stopped waiting for the thread when the lease was lost, and the operation is no
    # longer this writer's to answer for; the thread's request was refused at its write.
    assert raised.value.envelope.code == "OUTCOME_UNKNOWN"
    status = await other.status(KEY)
    assert status is not None
    assert [(a.execution, a.outcome) for a in status.attempts] == [(1, "fenced")]


async def test_a_send_reported_after_absence_was_proven_is_looked_up_before_any_rerun(
    make_ws: MakeWriteSafe, store_options: dict[str, Any]
) -> None:
    """The one pause no fence sees: a writer stops after its last check, before its write.

    Meanwhile another worker takes its lease and, a settle window later, finds nothing and
    judges the operation absent (`failed`). Then the writer wakes, sends and reports. Its report
    voids the absence: the next call looks up again and finds the order, instead of running it
    a second time.
    """
    orders: list[int] = []
    checked, judged = threading.Event(), threading.Event()

    async def find_order(op: LookupOperation) -> Found | NotFound:
        return Found({"order_id": orders[0]}) if orders else NotFound()

    def register(worker: WriteSafe) -> Any:
        @worker.tool("submit_order", timeout=None, lookup=find_order, settle_after=SETTLE)
        async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
            execution = worker.current_operation().execution
            worker.current_operation().fence()  # the last check passes...
            if execution == 1:
                checked.set()
                assert judged.wait(30)
            orders.append(execution)
            return {"order_id": execution}

        return submit_order

    async def other_worker() -> None:
        """Another process, whose reconciler takes the stalled writer's lease once it has run
        out and, a settle window later, judges the operation absent."""
        other = WriteSafe(**store_options, lease_seconds=LEASE)
        register(other)
        try:
            assert await asyncio.to_thread(checked.wait, 30)
            for _ in range(50):
                await asyncio.sleep(SETTLE / 2)
                await other.reconcile()  # it expires the unrenewed lease, then looks up
                status = await other.status(KEY)
                assert status is not None
                if status.status is Status.FAILED:
                    return
            raise AssertionError("the reconciler never judged the operation absent")
        finally:
            judged.set()
            await other.close()

    ws = make_ws(lease_seconds=LEASE)
    submit_order = register(ws)
    # The other worker runs in a thread of its own: this loop is blocked while the writer stalls.
    taker = threading.Thread(target=asyncio.run, args=(other_worker(),))
    taker.start()
    with pytest.raises(WriteSafeError) as first:
        await submit_order(ORDER, idempotency_key=KEY)
    taker.join()
    assert first.value.envelope.code == "OUTCOME_UNKNOWN"  # its lease had been taken
    assert orders == [1], "the stalled writer sent after the absence was judged"

    _, result = await call_as_a_client_would(submit_order, KEY)
    assert orders == [1], "the next call ran the write again"
    assert result == {"order_id": 1}
    status = await ws.status(KEY)
    assert status is not None
    assert (status.status, status.executions) == (Status.SUCCEEDED, 1)
    assert (status.attempts[-1].kind, status.attempts[-1].outcome) == ("lookup", "found")
