"""Structured logs: every line of the `writesafe` logger names the operation it was logged in."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import MakeWriteSafe
from writesafe import (
    LookupOperation,
    NotFound,
    OperationFilter,
    WriteSafeError,
    configure_logging,
)
from writesafe.reconciler import LookupResult

log = logging.getLogger("writesafe.shop")  # a child: its records reach the writesafe handler


@pytest.fixture
def json_lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    stream = io.StringIO()
    handler = configure_logging(json=True, stream=stream)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logging.getLogger("writesafe").removeHandler(handler)


async def test_json_lines_carry_the_operations_key_scope_and_tool(
    make_ws: MakeWriteSafe, json_lines: Any
) -> None:
    ws = make_ws()

    async def find(op: LookupOperation) -> LookupResult:
        log.warning("asking the shop")
        return NotFound()

    @ws.tool("submit_order", lookup=find, settle_after=0.0)
    async def submit_order(sku: str) -> str:
        log.info("placing %s", sku)
        if sku == "lost":
            raise httpx.ReadTimeout("sent, no answer")
        return "o-1"

    log.info("before any call")
    await submit_order("A1", idempotency_key="ord-7", scope="tenant-a")
    with pytest.raises(WriteSafeError):
        await submit_order("lost", idempotency_key="ord-8", scope="tenant-b")
    await ws.reconcile()  # the lookup of ord-8, in the reconciler's own task

    lines = json_lines()
    assert [(line["message"], line["key"], line["scope"], line["tool"]) for line in lines] == [
        ("before any call", None, None, None),
        ("placing A1", "ord-7", "tenant-a", "submit_order"),
        ("placing lost", "ord-8", "tenant-b", "submit_order"),
        ("asking the shop", "ord-8", "tenant-b", "submit_order"),
        # Every lookup answer is logged, naming its operation.
        ("lookup of tenant-b/ord-8 (submit_order): not_found", "ord-8", "tenant-b", "submit_order"),
    ]
    assert {"time", "level", "logger"} <= lines[1].keys()
    assert (lines[1]["level"], lines[1]["logger"]) == ("INFO", "writesafe.shop")


def test_configuring_twice_keeps_one_handler() -> None:
    first = configure_logging()
    second = configure_logging(json=True)
    try:
        handlers = logging.getLogger("writesafe").handlers
        assert second in handlers
        assert first not in handlers
    finally:
        logging.getLogger("writesafe").removeHandler(second)


def test_the_filter_serves_a_handler_of_your_own() -> None:
    record = logging.LogRecord("writesafe", logging.INFO, __file__, 1, "m", None, None)
    assert OperationFilter().filter(record)
    assert (record.writesafe_key, record.writesafe_scope, record.writesafe_tool) == (None,) * 3


async def test_a_line_about_every_held_lease_names_no_operation(
    make_ws: MakeWriteSafe, json_lines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The renewing task serves all leases; the call that happened to start it lends it nothing.
    ws = make_ws(lease_seconds=0.3)
    renewal_failed = asyncio.Event()

    async def unreachable(leases: Any, seconds: float) -> set[int]:
        renewal_failed.set()
        raise OSError("the ledger went away")

    monkeypatch.setattr(ws.ledger, "renew_leases", unreachable)

    @ws.tool("slow_write")
    async def slow_write() -> str:
        await asyncio.wait_for(renewal_failed.wait(), 5)
        await asyncio.sleep(0.05)  # the keeper logs right after its renewal failed
        return "done"

    with contextlib.suppress(WriteSafeError):
        await slow_write(idempotency_key="k", scope="s")

    renewals = [line for line in json_lines() if "could not renew" in line["message"]]
    assert renewals
    assert all((line["key"], line["tool"]) == (None, None) for line in renewals)
