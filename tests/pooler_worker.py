"""A process calling one guarded write under many keys at once, through a pooler.

    python -m tests.pooler_worker CONFIG_JSON

Each execution appends its key to a shared file (O_APPEND), so executions are counted across
processes. Prints one JSON line: how many calls ended how ({"ok": n, "TEMP_UNAVAILABLE": m, …}).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from writesafe import WriteSafe, WriteSafeError


async def main(config: dict[str, Any]) -> None:
    work = Path(config["work"])
    ws = WriteSafe(config["url"], schema=config["schema"])

    @ws.tool("submit_order", timeout=None)
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        with (work / "effects").open("a") as effects:
            effects.write(f"{order['key']}\n")
        await asyncio.sleep(0.01)
        return order

    await ws.start()
    while not (work / "go").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    ended: Counter[str] = Counter()
    in_flight = asyncio.Semaphore(config["in_flight"])

    async def call(key: str) -> None:
        async with in_flight:
            try:
                await submit_order({"key": key}, idempotency_key=key)
                ended["ok"] += 1
            except WriteSafeError as error:
                ended[error.envelope.code] += 1

    try:
        for _ in range(config["rounds"]):
            await asyncio.gather(*(call(key) for key in config["keys"]))
    finally:
        await ws.close()
    print(json.dumps(ended), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
