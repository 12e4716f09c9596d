"""Run a recorded order-submission case against a backend/adapter pair, and report what happened.

The recovery client submits the case's request once, keyed by the case id, and follows the
envelope it gets back: its final action is `complete` or the envelope's next action. Retries on
contention happen inside the guard (at most 3 executions). When the outcome is unknown, a
reconciliation pass asks the backend by key. Everything reported is observed: the ledger's
execution attempts and status, what the call returned, and the backend's own write count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from examples._sandbox import executions, sandbox
from examples.orders.adapters import adapter1, adapter2, adapter3
from examples.orders.backends import OrderService, backend1, backend2
from examples.orders.gateway import client
from writesafe import (
    Found,
    LookupOperation,
    NotFound,
    Tool,
    Unknown,
    WriteSafe,
    WriteSafeError,
)
from writesafe.reconciler import Adapter, AttemptView

MAX_EXECUTIONS = 3


class OrdersRunner:
    """`writesafe contract check` runner for order_submission.yaml."""

    backends: Mapping[str, Callable[[], OrderService]] = {
        "backend1": backend1,
        "backend2": backend2,
    }
    adapters: Mapping[str, Adapter] = {
        "adapter1": adapter1,
        "adapter2": adapter2,
        "adapter3": adapter3,
    }
    default_pair = ("backend1", "adapter1")
    declarations = Path(__file__).with_name("declarations.yaml")
    """The recorded file's vocabulary and wrong-result edits, which it cannot carry itself."""

    async def run(
        self, case: Mapping[str, Any], backend: Callable[[], OrderService], adapter: Adapter
    ) -> dict[str, Any] | None:
        service = backend()
        request = dict(case["request"])
        if not service.supports(request.get("fault", "none")):
            return None
        key = case["id"]
        base_url = "https://orders.test"
        async with (
            sandbox() as (ws, _clock),
            client(service.transport(), base_url=base_url) as http,
        ):
            submit = _submit_order_tool(ws, http, adapter)
            ending: dict[str, Any] = {"action": "complete", "disposition": "success"}
            try:
                await submit.key(key)(request)
            except WriteSafeError as error:
                envelope = error.envelope
                verdict = ws.codes.verdict(envelope.code)
                ending = {"action": envelope.next_action.value}
                if verdict.disposition is not None:
                    ending["disposition"] = verdict.disposition.value
            attempts = await executions(ws, key)
            observed = {
                "trace": [_row(attempt) for attempt in attempts],
                **ending,
                "executions": len(attempts),
                "writes": service.writes,
            }
            if observed["action"] == "reconcile":
                await ws.reconcile()
                status = await ws.status(key)
                observed["after_reconcile"] = {
                    "status": status.status.value if status else None,
                    "writes": service.writes,
                }
        return observed


def _submit_order_tool(
    ws: WriteSafe, http: httpx.AsyncClient, adapter: Adapter
) -> Tool[dict[str, Any]]:
    """The guarded write, forwarding the idempotency key, and its lookup by that key."""

    async def find_order(operation: LookupOperation) -> Found | NotFound | Unknown:
        response = await http.get("/orders", params={"reference": operation.key})
        if response.status_code == 200:
            return Found(response.json())
        if response.status_code == 404:
            return NotFound()
        return Unknown(f"lookup answered {response.status_code}")

    @ws.tool(
        "submit_order",
        adapter=adapter,
        lookup=find_order,
        timeout=5.0,
        max_executions=MAX_EXECUTIONS,
    )
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        reference = ws.current_operation().key
        response = await http.post("/orders", json=order, headers={"Idempotency-Key": reference})
        response.raise_for_status()
        created: dict[str, Any] = response.json()
        return created

    return submit_order


def _row(attempt: AttemptView) -> list[Any]:
    """[code, retryable, field] of one execution; a success is [OK, null, null]."""
    if attempt.outcome == "succeeded":
        return ["OK", None, None]
    if attempt.error is None:
        return [attempt.outcome, None, None]
    return [attempt.error.code, attempt.error.retryable, attempt.error.field]


runner = OrdersRunner()
