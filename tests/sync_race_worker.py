"""A separate process calling one guarded plain `def` write (the sync path); tests start several.

    python -m tests.sync_race_worker CONFIG_JSON

The effect is a line appended to a shared file (O_APPEND), so effects are counted across
processes. Prints one JSON line: {"result": ...} or {"error": CODE}.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from writesafe import WriteSafe, WriteSafeError, WriteSafeSettings


def main(config: dict[str, Any]) -> None:
    work = Path(config["work"])
    # One pooled connection per process: eight of them share the machine's PostgreSQL.
    ws = WriteSafe(**config["writesafe"], settings=WriteSafeSettings(pool_size=1))

    @ws.tool("submit_order", timeout=None)
    def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        with (work / "effects").open("a") as effects:
            effects.write(f"{os.getpid()}\n")
        time.sleep(config["hold_seconds"])
        return {"order": order, "pid": os.getpid()}

    ws.sync.start()
    (work / f"ready-{os.getpid()}").touch()
    while not (work / "go").exists():
        time.sleep(0.005)
    try:
        result = submit_order({"sku": "A1"}, idempotency_key=config["key"])
        print(json.dumps({"result": result}), flush=True)
    except WriteSafeError as error:
        print(json.dumps({"error": error.envelope.code}), flush=True)
    finally:
        ws.sync.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
