"""Cache fills written behind the caller: a succeeded call answers once the ledger has its outcome.

The Redis copy of an outcome only saves later callers a round trip, so the caller need not wait
for it. The copy is still written in order: a later call on the same key in this process waits
for the pending fill first (otherwise it would find the lease still in Redis and poll for it),
and closing the guard waits for every fill. A fill that never ran (a crash, or an event loop
that ended first) leaves the writer's lease in Redis; a duplicate's first look finds the outcome
in the ledger instead (`Guard._finished_in_ledger`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

logger = logging.getLogger("writesafe")

Slot = tuple[str, str]  # (scope, key)


class CacheFills:
    """The cache writes still running: the latest per `(scope, key)` for callers to wait on, and
    all of them for closing."""

    def __init__(self) -> None:
        self._pending: dict[Slot, asyncio.Future[None]] = {}
        self._running: set[asyncio.Future[None]] = set()

    def start(self, slot: Slot, fill: Awaitable[None]) -> None:
        """Run `fill` in the background (a coroutine as a task of its own; a future is running
        already); later calls on `slot` wait for it."""
        task = asyncio.ensure_future(fill)
        self._pending[slot] = task
        self._running.add(task)
        task.add_done_callback(lambda done: self._finished(slot, done))

    async def settled(self, slot: Slot) -> None:
        """Wait for the fill pending on `slot` in this event loop, if there is one."""
        task = self._pending.get(slot)
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            # `wait`, not `await task`: a caller that gives up waiting must not cancel the fill
            # others wait for, and a failed fill is logged, not raised into an unrelated call.
            await asyncio.wait((task,))

    async def drain(self) -> None:
        """Wait for every fill started on this event loop (fills of closed loops died with them)."""
        loop = asyncio.get_running_loop()
        tasks = [task for task in self._running if task.get_loop() is loop]
        if tasks:
            await asyncio.wait(tasks)

    def _finished(self, slot: Slot, task: asyncio.Future[None]) -> None:
        self._running.discard(task)
        if self._pending.get(slot) is task:
            del self._pending[slot]
        if not task.cancelled() and (error := task.exception()) is not None:
            # The key store degrades on its own errors; anything else is a bug worth seeing.
            logger.error("a cache fill failed", exc_info=error)
