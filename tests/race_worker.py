"""A separate process calling one guarded write; the tests start several and kill some.

    python -m tests.race_worker CONFIG_JSON

The effect is a line appended to a shared file (O_APPEND), so effects are counted across
processes. Prints one JSON line: {"result": ...} or {"error": CODE}.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from writesafe import WriteSafe, WriteSafeError


async def main(config: dict[str, Any]) -> None:
    work = Path(config["work"])
    ws = WriteSafe(**config["writesafe"])

    @ws.tool("submit_order", timeout=None)
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        with (work / "effects").open("a") as effects:
            effects.write(f"{os.getpid()}\n")
        (work / f"started-{os.getpid()}").touch()
        await asyncio.sleep(config["hold_seconds"])
        return {"order": order, "pid": os.getpid()}

    await ws.start()
    # The test starts every worker at once through the file system (no shared event loop).
    while not (work / "go").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    try:
        result = await submit_order({"sku": "A1"}, idempotency_key=config["key"])
        print(json.dumps({"result": result}), flush=True)
    except WriteSafeError as error:
        print(json.dumps({"error": error.envelope.code}), flush=True)
    finally:
        await ws.close()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
