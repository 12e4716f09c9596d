"""writesafe: make side-effecting tools safe to call from software that retries.

    from writesafe import WriteSafe, WriteSafeError

    ws = WriteSafe()  # embedded default: a SQLite file, no servers

    @ws.tool("submit_order", timeout=5.0)
    async def submit_order(order: dict) -> dict: ...

    await submit_order({"sku": "A1"}, idempotency_key="ord-7")

This module is the public face of `writesafe.idempotency`, whose `__all__` it takes (pinned by
tests/test_public_api.py). Below it:
`writesafe.idempotency` (at most once), `writesafe.reconciler` (what may happen next) and
`writesafe.ledger` (what happened); beside it the entry floor, `writesafe.cli`,
`writesafe.service` and the framework integrations in `writesafe.contrib`, which may import all
three.
"""

from __future__ import annotations

# One list of public names: writesafe.idempotency's (the integrations have their own corner,
# writesafe.contrib, so nothing here loads a framework).
from writesafe.idempotency import *  # noqa: F403
from writesafe.idempotency import __all__ as __all__
