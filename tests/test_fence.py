"""The send-time fence: a writer frozen past its lease never sends once another caller may hold
the key, and absence is not trusted while the old writer may still send.

The frozen writer is a real process that stops itself (SIGSTOP) just before its send; the
duplicate is this test's own `WriteSafe`, meeting it only in the stores.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Header, Response

from tests.conftest import MakeWriteSafe
from tests.loopback import on_loopback
from writesafe import (
    FencedTransport,
    Found,
    LeaseLost,
    LookupOperation,
    NotFound,
    Status,
    WriteSafe,
    WriteSafeError,
    fenced_client,
)

ROOT = Path(__file__).resolve().parent.parent
LEASE = 1.0
SETTLE = 0.5
ORDER = {"sku": "A1", "quantity": 1}


@dataclass
class Downstream:
    """An order service that files each order under the key it was sent with."""

    orders: dict[str, dict[str, Any]] = field(default_factory=dict)
    received: list[tuple[str, int]] = field(default_factory=list)  # (key, fencing token)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/orders")
        async def place(
            order: dict[str, Any],
            idempotency_key: str = Header(),
            fencing_token: int = Header(),
        ) -> dict[str, Any]:
            self.received.append((idempotency_key, fencing_token))
            placed = {**order, "order_id": f"o-{len(self.orders) + 1}"}
            self.orders.setdefault(idempotency_key, placed)
            return self.orders[idempotency_key]

        @app.get("/orders/{key}")
        async def find(key: str, response: Response) -> dict[str, Any]:
            if key not in self.orders:
                response.status_code = 404
                return {}
            return self.orders[key]

        return app


@pytest.fixture
async def downstream() -> AsyncIterator[tuple[Downstream, str]]:
    service = Downstream()
    async with on_loopback(service.app(), lifespan="off") as url:
        yield service, url


def start_stalling_writer(options: dict[str, Any], url: str, key: str) -> subprocess.Popen[str]:
    config = {
        "writesafe": {**options, "lease_seconds": LEASE},
        "url": url,
        "key": key,
        "order": ORDER,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.stall_worker", json.dumps(config)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def process_state(pid: int) -> str:
    """The one-letter state of a process, from /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def wait_until_stopped(process: subprocess.Popen[str]) -> None:
    """Until the process has frozen itself (state T in /proc), within 30 s."""
    for _ in range(3000):
        if process.poll() is not None:
            raise AssertionError(f"the writer exited early: {process.communicate()[0]!r}")
        if process_state(process.pid) == "T":
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the writer never reached its send")


def duplicate_tool(ws: WriteSafe, client: httpx.AsyncClient) -> Any:
    async def find_order(op: LookupOperation) -> Found | NotFound:
        response = await client.get(f"/orders/{op.key}")
        return NotFound() if response.status_code == 404 else Found(response.json())

    @ws.tool("submit_order", timeout=None, lookup=find_order, settle_after=SETTLE)
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        response = await client.post("/orders", json=order)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    return submit_order


async def call_as_a_client_would(tool: Any, key: str) -> tuple[list[str], dict[str, Any]]:
    """Call until there is a result, honouring `retry_after_ms`; the codes met on the way."""
    codes: list[str] = []
    for _ in range(100):
        try:
            result: dict[str, Any] = await tool(ORDER, idempotency_key=key)
            return codes, result
        except WriteSafeError as error:
            envelope = error.envelope
            assert envelope.code in ("IN_PROGRESS", "OUTCOME_UNKNOWN"), envelope
            codes.append(envelope.code)
            await asyncio.sleep((envelope.retry_after_ms or 100) / 1000)
    raise AssertionError(f"no result after {codes}")


async def test_a_writer_frozen_past_its_lease_never_sends_after_a_takeover(
    make_ws: MakeWriteSafe,
    store_options: dict[str, Any],
    downstream: tuple[Downstream, str],
) -> None:
    service, url = downstream
    key = "ord-frozen"
    writer = start_stalling_writer(store_options, url, key)
    try:
        await wait_until_stopped(writer)
        await asyncio.sleep(LEASE * 1.3)  # frozen past its lease: no renewal reached the stores
        ws = make_ws(lease_seconds=LEASE)
        async with fenced_client(base_url=url) as client:
            codes, result = await call_as_a_client_would(duplicate_tool(ws, client), key)
        # The takeover did not trust the lookup's "not found" at once: the old writer might
        # still have been about to send.
        assert "OUTCOME_UNKNOWN" in codes
        assert service.received == [(key, 2)], "the duplicate executed once, as execution 2"
    finally:
        writer.send_signal(signal.SIGCONT)
    output, _ = writer.communicate(timeout=60)
    answer = json.loads(output.strip().splitlines()[-1])
    # The woken writer's send was refused by its fence: nothing reached the downstream.
    assert answer == {"error": "TEMP_UNAVAILABLE", "side_effects": "none"}
    assert service.received == [(key, 2)]
    assert list(service.orders) == [key]
    assert result == service.orders[key]
    status = await ws.status(key)
    assert status is not None
    assert status.status is Status.SUCCEEDED


async def test_the_guard_refuses_to_invoke_a_write_whose_fence_closed_since_the_claim(
    make_ws: MakeWriteSafe,
) -> None:
    """A stall between the claim and the invocation: the tool is not called on a lease that may
    be gone. The refusal proved no effect, so the guard retries under a renewed lease."""
    ws = make_ws(lease_seconds=LEASE)
    invoked: list[int] = []

    @ws.tool("submit_order", timeout=None)
    async def submit_order(order: dict[str, Any]) -> str:
        invoked.append(ws.current_operation().execution)
        return "placed"

    original = ws.ledger.claim

    async def claim_then_stall(intent: Any) -> Any:
        claimed = await original(intent)
        time.sleep(LEASE)  # noqa: ASYNC251 (the fault: a blocked loop renews nothing)
        return claimed

    ws.ledger.claim = claim_then_stall  # type: ignore[method-assign]
    assert await submit_order(ORDER, idempotency_key="ord-late") == "placed"
    assert invoked == [2], "execution 1 was refused before the tool ran"
    status = await ws.status("ord-late")
    assert status is not None
    executions = [a for a in status.attempts if a.kind == "execution"]
    assert [(a.execution, a.code) for a in executions] == [(1, "TEMP_UNAVAILABLE"), (2, None)]


async def test_the_lease_keeper_ends_a_write_whose_renewal_is_refused(
    make_ws: MakeWriteSafe,
) -> None:
    """Another actor takes the operation while the write runs: the next renewal is refused, the
    write's task is cancelled, and the caller learns the outcome is unknown."""
    ws = make_ws(lease_seconds=3.0)  # renewed each second; the fence alone would close at 2.4 s
    started = asyncio.Event()
    finished: list[str] = []

    @ws.tool("submit_order", timeout=None)
    async def submit_order(order: dict[str, Any]) -> str:
        started.set()
        await asyncio.sleep(10)
        finished.append("ran to the end")
        return "placed"

    call = asyncio.create_task(submit_order(ORDER, idempotency_key="ord-taken"))
    await started.wait()
    row = await ws.ledger.get("default", "ord-taken")
    assert row is not None
    assert await ws.ledger.transition(row, Status.OUTCOME_UNKNOWN, lease_owner=None) is not None
    began = time.monotonic()
    with pytest.raises(WriteSafeError) as raised:
        await call
    assert time.monotonic() - began < 1.8, "cancelled at the refused renewal, not at the fence"
    assert finished == []
    assert raised.value.envelope.code == "OUTCOME_UNKNOWN"


async def test_the_fence_closes_by_itself_when_renewals_cannot_be_confirmed(
    make_ws: MakeWriteSafe,
) -> None:
    """A write whose lease cannot be renewed (here: the event loop is blocked inside the tool)
    finds its fence closed at its next send, with the key and token of its execution."""
    ws = make_ws(lease_seconds=LEASE)
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"ok": True})

    transport = FencedTransport(httpx.MockTransport(record))
    async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:

        @ws.tool("submit_order", timeout=None, max_executions=1)
        async def submit_order(order: dict[str, Any]) -> str:
            await client.post("/orders", json=order)  # admitted: the lease is fresh
            time.sleep(LEASE)  # noqa: ASYNC251 (the fault: it blocks the loop past the fence)
            await client.post("/orders", json=order)  # refused
            return "placed twice"

        with pytest.raises(WriteSafeError) as raised:
            await submit_order(ORDER, idempotency_key="ord-slow")
        assert [(r.headers["Idempotency-Key"], r.headers["Fencing-Token"]) for r in sent] == [
            ("ord-slow", "1")
        ]
        # A send had been admitted before the refusal, so the outcome is unknown, not "none".
        assert raised.value.envelope.code == "OUTCOME_UNKNOWN"
        # Outside a guarded write the transport passes requests on untouched.
        await client.post("/ping")
        assert "Fencing-Token" not in sent[-1].headers


def test_lease_lost_says_whether_anything_was_sent() -> None:
    assert not LeaseLost("k", sent_before=False).sent_before
    assert "before anything was sent" in str(LeaseLost("k", sent_before=False))
