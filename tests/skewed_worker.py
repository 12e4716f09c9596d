"""A separate process, usually run under libfaketime with its clock off, that acts on one key.

    faketime -f +30s python -m tests.skewed_worker CONFIG_JSON

`config["action"]`: "call" makes a duplicate call of the tool with `config["key"]`; "reconcile"
runs one reconciliation pass. The effect and the lookup use a file the test shares (one line per
effect), so they are counted across processes. Prints one JSON line: the answer.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from writesafe import Found, LookupOperation, NotFound, WriteSafe, WriteSafeError


def effects(work: Path) -> list[str]:
    path = work / "effects"
    return path.read_text().split() if path.exists() else []


def register(ws: WriteSafe, work: Path, release: asyncio.Event | None = None) -> Any:
    """The tool every process of the test shares: an effect is a line in `work/effects`,
    written once `release` is set (at once without one)."""

    async def find_order(op: LookupOperation) -> Found | NotFound:
        return Found({"key": op.key}) if op.key in effects(work) else NotFound()

    @ws.tool("submit_order", timeout=None, lookup=find_order, settle_after=1.0)
    async def submit_order(order: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        if release is not None:
            await release.wait()  # the write takes its time, then lands
        with (work / "effects").open("a") as written:
            written.write(f"{idempotency_key}\n")
        return {"key": idempotency_key}

    return submit_order


async def main(config: dict[str, Any]) -> None:
    ws = WriteSafe(**config["writesafe"])
    tool = register(ws, Path(config["work"]))
    answer: dict[str, Any] = {"clock": datetime.datetime.now(datetime.UTC).isoformat()}
    try:
        if config["action"] == "call":
            answer["result"] = await tool({"sku": "A1"}, idempotency_key=config["key"])
        else:
            answer["report"] = (await ws.reconcile()).model_dump(exclude={"seconds"})
    except WriteSafeError as error:
        answer["error"] = error.envelope.code
    finally:
        await ws.close()
    print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
