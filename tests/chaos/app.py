"""The writesafe application under test: one guarded tool that submits orders to the chaos shop.

Configured entirely from the environment (the harness sets it), so every process — client workers
and `writesafe reconcile tests.chaos.app:ws --watch` workers — loads the same application:
`WRITESAFE_*` for the stores, `CHAOS_SHOP_URL` for the shop, `CHAOS_PLAN` for the timings and
`CHAOS_RUN_DIR` for the run's directory (outside a run, nothing stalls).
The tool sends through writesafe's httpx integration (`fenced_client`): every request passes the
execution's fence and carries its key and fencing token. Where the plan says so, the first
execution of an order to get there, in any process, stops its process just before its send: in
the tool, before the fence (the fence's to refuse once the process is continued), inside the
transport after the fence admitted the request (the fence's check at the write refuses it), or as
the write starts, after that check (only a downstream that checks the token can refuse that one).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.chaos._plan import Plan, StallPoint, plan_from_json
from writesafe import NoCurrentOperation, WriteSafe, current_operation, fenced_client
from writesafe.reconciler import Found, LookupOperation, LookupResult, NotFound, ToolError, Unknown

PLAN = plan_from_json(os.environ["CHAOS_PLAN"]) if "CHAOS_PLAN" in os.environ else Plan(seed=0)
TIMINGS = PLAN.timings
SHOP_URL = os.environ.get("CHAOS_SHOP_URL", "http://127.0.0.1:8123")
RUN_DIR = os.environ.get("CHAOS_RUN_DIR")

ws = WriteSafe()

_clients: dict[int, httpx.AsyncClient] = {}


def stall_here(point: StallPoint) -> None:
    """Stop this process if the plan stalls the current execution's order at `point` and no
    execution of it stopped there before, in any process of the run."""
    try:
        operation = current_operation()
    except NoCurrentOperation:  # a lookup's request: lookups are not stalled
        return
    if RUN_DIR is None or PLAN.stall_point(operation.key) is not point:
        return
    try:  # the order's stall is taken once per run: whichever execution gets there first
        (Path(RUN_DIR) / f"stalled-{operation.key}").touch(exist_ok=False)
    except FileExistsError:
        return
    print(f"chaos stall {point.value} {operation.key} #{operation.execution}", file=sys.stderr)
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGSTOP)  # the harness continues it after the stall


class _StallAfterFence(httpx.AsyncHTTPTransport):
    """httpx's own transport, under the fenced one: a stall here comes after the fence admitted
    the request, either before its write (the fence's check at the write refuses it) or as the
    write starts, after that check (only a downstream that checks the token can refuse that)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        stall_here(StallPoint.AFTER_FENCE)
        fenced = request.extensions.get("trace")  # the fenced transport's check at the write
        if fenced is not None:

            async def check_then_stall(event: str, info: dict[str, Any]) -> None:
                await fenced(event, info)
                if event.endswith(".send_request_headers.started"):
                    stall_here(StallPoint.AT_WRITE)

            request.extensions["trace"] = check_then_stall
        return await super().handle_async_request(request)


def shop() -> httpx.AsyncClient:
    """One HTTP client per process (each process runs one event loop)."""
    client = _clients.get(os.getpid())
    if client is None:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        transport = _StallAfterFence(limits=limits)
        client = _clients[os.getpid()] = fenced_client(base_url=SHOP_URL, transport=transport)
    return client


async def find_order(op: LookupOperation) -> LookupResult:
    """The lookup by client reference: the shop either has the order or it does not."""
    response = await shop().get(f"/orders/{op.key}", timeout=2.0)
    if response.status_code == 200:
        return Found(response.json())
    if response.status_code == 404:
        return NotFound()
    return Unknown(f"lookup answered {response.status_code}")


@ws.tool(
    "submit_order",
    lookup=find_order,
    timeout=TIMINGS.client_timeout,
    settle_after=TIMINGS.settle_after,
    max_executions=4,
)
async def submit_order(order: dict[str, Any], idempotency_key: str) -> dict[str, str]:
    """Submit an order, forwarding the idempotency key as the shop's client reference."""
    stall_here(StallPoint.BEFORE_FENCE)
    response = await shop().post(
        "/orders", json={**order, "ref": idempotency_key}, timeout=TIMINGS.client_timeout * 4
    )
    if response.status_code == 201:
        created: dict[str, str] = response.json()
        return created
    if response.status_code == 422:
        body = response.json()
        raise ToolError("INPUT_INVALID", body.get("message", ""), field=body.get("field"))
    if response.status_code == 401:
        raise ToolError("AUTH_REQUIRED", "the shop wants a fresh token")
    if response.status_code == 503 and "retry-after" in response.headers:
        delay = int(response.headers["retry-after"]) * 1000
        raise ToolError("DEPENDENCY_BUSY", "the shop is busy", retry_after_ms=delay)
    # Anything else is not understood: fail closed (UNKNOWN_ERROR, side effects unknown).
    raise RuntimeError(f"unexpected answer from the shop: {response.status_code}")
