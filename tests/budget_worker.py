"""A process that serves a burst of guarded calls and reads, then sits idle until told to stop.

    python -m tests.budget_worker CONFIG_JSON

Touches `burst-<index>` in the work folder once its burst is answered, and exits when `stop`
appears there. Prints one JSON line: how many calls ended how ({"ok": n, …}).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from writesafe import WriteSafe, WriteSafeError, WriteSafeSettings


async def main(config: dict[str, Any]) -> None:
    work = Path(config["work"])
    settings = WriteSafeSettings(**config["settings"])
    ws = WriteSafe(config["url"], schema=config["schema"], settings=settings)

    @ws.tool("submit_order", timeout=None)
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.02)
        return order

    ended: Counter[str] = Counter()

    async def call(n: int) -> None:
        try:
            await submit_order({"n": n}, idempotency_key=f"{config['index']}-{n}")
            ended["ok"] += 1
        except WriteSafeError as error:
            ended[error.envelope.code] += 1

    async def read() -> None:
        await ws.ledger.list(limit=10)
        ended["read"] += 1

    await ws.start()
    while not (work / "go").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    await asyncio.gather(*(call(n) for n in range(24)), *(read() for _ in range(8)))
    (work / f"burst-{config['index']}").touch()
    while not (work / "stop").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await ws.close()
    print(json.dumps(ended), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
