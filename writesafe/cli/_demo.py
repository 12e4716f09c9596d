"""`writesafe demo`: the order-submission story, on the embedded default, against a fake shop.

Nothing here needs a server: the ledger is a SQLite file in a temporary directory (or the one
`--database-url` names) and the shop lives in this process.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from writesafe.cli._options import JsonOption
from writesafe.idempotency import Found, NotFound, ToolError, WriteSafe, WriteSafeError

# How long the shop takes to answer when it is slow, against the tool's timeout.
_SLOW_ANSWER = 1.0
_TIMEOUT = 0.25


@dataclass
class FakeShop:
    """A downstream that keeps orders by client reference and can misbehave on request."""

    orders: dict[str, dict[str, Any]] = field(default_factory=dict)
    busy_once: set[str] = field(default_factory=set)

    async def submit(self, reference: str, order: dict[str, Any]) -> dict[str, Any]:
        if order.get("postcode") == "000000":
            raise ToolError("INPUT_INVALID", "postcode is not served", field="postcode")
        if order.get("fault") == "busy_once" and reference not in self.busy_once:
            self.busy_once.add(reference)
            raise ToolError("DEPENDENCY_BUSY", "the order book is locked", retry_after_ms=50)
        placed = {"order_id": f"ord-{len(self.orders) + 1:03d}", "sku": order["sku"]}
        self.orders[reference] = placed
        await asyncio.sleep(0.05)
        if order.get("fault") == "commit_then_timeout":
            await asyncio.sleep(_SLOW_ANSWER)  # committed, but the answer comes too late
        return placed


@dataclass
class Story:
    """What the demo did, row by row, for the summary tables; `resumed` if the ledger already
    held its keys (a run before it on the same `--database-url`), so every call replayed."""

    rows: list[tuple[str, str, str]] = field(default_factory=list)
    resumed: bool = False

    def add(self, step: str, key: str, answer: str) -> None:
        self.rows.append((step, key, answer))


async def _attempt(story: Story, step: str, key: str, call: Any) -> None:
    try:
        result = await call
        story.add(step, key, f"result {json.dumps(result)}")
    except WriteSafeError as error:
        envelope = error.envelope
        story.add(step, key, f"{envelope.code} → {envelope.next_action}")


async def run_story(database_url: str) -> tuple[Story, FakeShop, WriteSafe]:
    shop = FakeShop()
    ws = WriteSafe(database_url)

    async def find_order(operation: Any) -> Found | NotFound:
        placed = shop.orders.get(operation.key)
        return NotFound() if placed is None else Found(placed)

    @ws.tool("submit_order", timeout=_TIMEOUT, lookup=find_order, settle_after=0.0)
    async def submit_order(order: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        return await shop.submit(idempotency_key, order)

    story = Story(resumed=await ws.status("ord-1") is not None)
    order = {"sku": "A1", "postcode": "560001"}
    await _attempt(story, "first order", "ord-1", submit_order(order, idempotency_key="ord-1"))
    await _attempt(story, "same key again", "ord-1", submit_order(order, idempotency_key="ord-1"))
    burst = [submit_order({"sku": "B2"}, idempotency_key="ord-2") for _ in range(20)]
    answers = await asyncio.gather(*burst, return_exceptions=True)
    distinct = len({str(answer) for answer in answers})
    story.add(
        "20 concurrent duplicates",
        "ord-2",
        "one answer for all" if distinct == 1 else f"{distinct} different answers",
    )
    changed = {"sku": "Z9", "postcode": "560001"}
    await _attempt(
        story, "same key, new payload", "ord-1", submit_order(changed, idempotency_key="ord-1")
    )
    busy = {"sku": "C3", "postcode": "560001", "fault": "busy_once"}
    await _attempt(story, "shop busy once", "ord-3", submit_order(busy, idempotency_key="ord-3"))
    invalid = {"sku": "D4", "postcode": "000000"}
    await _attempt(
        story, "invalid postcode", "ord-4", submit_order(invalid, idempotency_key="ord-4")
    )
    slow = {"sku": "E5", "postcode": "560001", "fault": "commit_then_timeout"}
    await _attempt(
        story, "timeout after commit", "ord-5", submit_order(slow, idempotency_key="ord-5")
    )
    await _attempt(
        story, "retry after timeout", "ord-5", submit_order(slow, idempotency_key="ord-5")
    )
    return story, shop, ws


def _tables(story: Story, shop: FakeShop, operations: list[Any]) -> list[Table]:
    steps = Table(title="What the caller saw")
    for column in ("step", "key", "answer"):
        steps.add_column(column)
    for row in story.rows:
        steps.add_row(*row)
    ledger = Table(title="The ledger")
    for column in ("key", "status", "executions", "attempts"):
        ledger.add_column(column)
    for operation in operations:
        attempts = ", ".join(f"{a.kind.value}:{a.outcome}" for a in operation.attempts)
        ledger.add_row(operation.key, operation.status.value, str(operation.executions), attempts)
    orders = Table(title="The shop's orders")
    for column in ("client reference", "order"):
        orders.add_column(column)
    for reference, placed in shop.orders.items():
        orders.add_row(reference, json.dumps(placed))
    return [steps, ledger, orders]


def demo(
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="Ledger URL (default: a SQLite file in a temp dir)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Run the order-submission story end to end on the embedded default and show the ledger."""
    with tempfile.TemporaryDirectory(prefix="writesafe-demo-") as directory:
        url = database_url or f"sqlite+aiosqlite:///{Path(directory) / 'writesafe.db'}"

        async def run() -> tuple[Story, FakeShop, list[Any]]:
            story, shop, ws = await run_story(url)
            try:
                keys = dict.fromkeys(key for _, key, _ in story.rows)
                operations = [await ws.status(key) for key in keys]
            finally:
                await ws.close()
            return story, shop, [operation for operation in operations if operation]

        story, shop, operations = asyncio.run(run())
    console = Console()
    if as_json:
        console.print_json(
            data={
                "steps": [
                    dict(zip(("step", "key", "answer"), row, strict=True)) for row in story.rows
                ],
                "operations": [operation.model_dump(mode="json") for operation in operations],
                "shop_orders": shop.orders,
                "resumed": story.resumed,
            }
        )
        return
    where = url if database_url else "a SQLite file in a temporary directory, removed at the end"
    console.print(
        "[bold]The order-submission story[/bold]: a caller submits orders to a fake shop through "
        "one guarded tool, and retries the way agents and job runners do — the same key again, "
        "20 duplicates at once, a busy shop, bad input, and a timeout after the shop committed.\n"
        f"Ledger: {where}\n"
    )
    if story.resumed:
        console.print(
            "This ledger already held the story's keys (an earlier run): every call was answered "
            "from it, so the shop, new in this process, received no order.\n"
        )
    for table in _tables(story, shop, operations):
        console.print(table)
    console.print(
        f"[bold]{len(shop.orders)} orders[/bold] for {len(operations)} operations: "
        "no key ran twice.\n\n"
        "Try next: keep the ledger with `writesafe demo --database-url "
        "sqlite+aiosqlite:///demo.db`, then read an operation's attempts with `writesafe status "
        "ord-5 --database-url sqlite+aiosqlite:///demo.db`; wrap your own tool as in "
        "docs/getting-started.md."
    )
