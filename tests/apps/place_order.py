"""`python -m tests.apps.place_order KEY SKU`: one guarded call; prints the result as JSON."""

from __future__ import annotations

import asyncio
import json
import sys

from tests.apps.shop_app import submit_order, ws


async def main(key: str, sku: str) -> None:
    try:
        print(json.dumps(await submit_order(sku, idempotency_key=key)), flush=True)
    finally:
        await ws.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
