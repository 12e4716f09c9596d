"""writesafe: make side-effecting tools safe to call from software that retries.

    from writesafe import WriteSafe, WriteSafeError

    ws = WriteSafe()  # embedded default: a SQLite file, no servers

    @ws.tool("submit_order", timeout=5.0)
    async def submit_order(order: dict) -> dict: ...

    await submit_order({"sku": "A1"}, idempotency_key="ord-7")

This module is the public face of `writesafe.idempotency`, whose `__all__` it takes (pinned by
tests/test_public_api.py). Below it:
`writesafe.idempotency` (at most once), `writesafe.reconciler` (what may happen next) and
`writesafe.ledger` (what happened); beside it the entry floor, `writesafe.cli` and
`writesafe.service`, which may import all three.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import writesafe.idempotency as _face

if TYPE_CHECKING:
    from writesafe.idempotency import *  # noqa: F403  (the same names, for type checkers)

# One list of public names: writesafe.idempotency's. Each is fetched from there on first use,
# so the integrations (FastAPI, the MCP SDK, ...) stay unloaded until someone asks for them.
__all__ = list(_face.__all__)


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'writesafe' has no attribute {name!r}")
    value = getattr(_face, name)
    globals()[name] = value  # later lookups skip this function
    return value
