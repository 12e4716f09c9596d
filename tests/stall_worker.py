"""A separate process whose guarded write freezes itself (SIGSTOP) just before it sends.

    python -m tests.stall_worker CONFIG_JSON

The write sends through the httpx integration to the test's downstream at `config["url"]`; the
test continues the process (SIGCONT) when it chooses. Prints one JSON line: {"result": ...} or
{"error": CODE, "side_effects": ...}.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from writesafe import WriteSafe, WriteSafeError, fenced_client


async def main(config: dict[str, Any]) -> None:
    ws = WriteSafe(**config["writesafe"])
    async with fenced_client(base_url=config["url"]) as client:

        @ws.tool("submit_order", timeout=None)
        async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
            os.kill(os.getpid(), signal.SIGSTOP)  # a stall at the worst moment: before the send
            response = await client.post("/orders", json=order)
            response.raise_for_status()
            result: dict[str, Any] = response.json()
            return result

        try:
            result = await submit_order(config["order"], idempotency_key=config["key"])
            print(json.dumps({"result": result}), flush=True)
        except WriteSafeError as error:
            envelope = error.envelope
            print(json.dumps({"error": envelope.code, "side_effects": envelope.side_effects}))
        finally:
            await ws.close()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
