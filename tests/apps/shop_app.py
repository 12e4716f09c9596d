"""A WriteSafe application for process tests, configured by environment variables the way a
deployed `writesafe reconcile tests.apps.shop_app:ws` would be: WRITESAFE_* for the ledger,
SHOP_DATABASE_URL / SHOP_SCHEMA for the downstream, SHOP_LOOKUP_LATENCY (seconds) and
SHOP_HANG_AFTER_COMMIT (a marker file: write it after the commit, then hang until killed)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from tests.apps.shop_db import ShopDB
from writesafe import Found, LookupOperation, NotFound, WriteSafe
from writesafe.reconciler import LookupResult

shop = ShopDB(
    os.environ["SHOP_DATABASE_URL"], schema=os.environ.get("SHOP_SCHEMA") or None, pooled=True
)
ws = WriteSafe()
_LATENCY = float(os.environ.get("SHOP_LOOKUP_LATENCY", "0"))


async def find_order(op: LookupOperation) -> LookupResult:
    if _LATENCY:
        await asyncio.sleep(_LATENCY)
    order = await shop.find(op.key)
    return NotFound() if order is None else Found(order)


@ws.tool("submit_order", lookup=find_order, settle_after=0.0)
async def submit_order(sku: str, idempotency_key: str) -> dict[str, Any]:
    order = await shop.place(idempotency_key, sku)
    marker = os.environ.get("SHOP_HANG_AFTER_COMMIT")
    if marker:
        await asyncio.to_thread(Path(marker).write_text, "committed")
        await asyncio.sleep(3_600)
    return order
