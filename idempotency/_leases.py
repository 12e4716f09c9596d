"""Keeping the leases of a process's running writes alive, all of them in one statement per tick.

A lease per write renewed by a task per write costs a task on every call and a transaction per
write every `lease/3`, which caps a process at a few hundred concurrent long writes. Instead the
guard registers each running write here; one task renews every registered lease with one ledger
statement (and one Redis pipeline) per tick, and exits at a tick that finds no write running.
Each confirmed renewal moves the write's send-time fence on; a refused one closes it, which ends
the write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from contextvars import Context
from dataclasses import dataclass
from typing import TYPE_CHECKING

from writesafe.idempotency._fence import Fence
from writesafe.ledger import Ledger

if TYPE_CHECKING:
    from writesafe.idempotency._keystore import RedisKeyStore

logger = logging.getLogger("writesafe")


@dataclass(frozen=True, slots=True)
class HeldLease:
    """A running write's lease: the ledger's `(operation, owner)` and the key store's token."""

    operation_id: int
    owner: str
    scope: str
    key: str
    # None without a key store. A token whose Redis lease is not ours (Redis was down at the
    # claim, or another payload held the key) renews nothing: the renewal compares the token.
    store_token: str | None
    fence: Fence


class LeaseKeeper:
    """Renews every held lease each `lease_seconds / 3`, until its write lets go of it.

    A lease the ledger no longer grants (it expired and was taken over) is dropped and its fence
    closed: the write's task is cancelled, and its owner finds its outcome fenced off when it
    records it. A renewal that fails (the ledger is unreachable) confirms nothing, so the fence
    closes by itself when the last confirmed lease is about to run out.
    """

    def __init__(
        self,
        ledger: Ledger,
        keystore: RedisKeyStore | None,
        lease_seconds: float,
        errors: tuple[type[BaseException], ...],
    ) -> None:
        self._ledger = ledger
        self._keystore = keystore
        self._lease_seconds = lease_seconds
        self._errors = errors
        self._held: dict[int, HeldLease] = {}
        self._task: asyncio.Task[None] | None = None

    def hold(self, lease: HeldLease) -> None:
        """Keep `lease` alive until it is released (or lost); starts the renewing task if none
        runs on this event loop."""
        self._held[lease.operation_id] = lease
        task = self._task
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            # In a context of its own: the task serves every held lease, so the call that
            # happened to start it must not lend it its operation (log fields) or its span.
            self._task = asyncio.create_task(self._renew_while_held(), context=Context())

    def release(self, lease: HeldLease) -> None:
        # The very lease held, not an equal one: comparing every field cost more than the rest.
        if self._held.get(lease.operation_id) is lease:
            del self._held[lease.operation_id]

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is None or task.done():
            return
        task.cancel()
        if task.get_loop() is asyncio.get_running_loop():
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _renew_while_held(self) -> None:
        # Asked after each wait, not before: a write that ends before the task's first step (one
        # that never suspends, as an embedded outcome committed on the caller's thread) would
        # otherwise end the task at once, and the next write start another: a task per write.
        while True:
            await asyncio.sleep(self._lease_seconds / 3)
            if not self._held:
                return
            await self._renew(list(self._held.values()))

    async def _renew(self, leases: list[HeldLease]) -> None:
        owners = {lease.operation_id: lease.owner for lease in leases}
        sent_at = time.monotonic()
        try:
            kept = await self._ledger.renew_leases(owners, self._lease_seconds)
        except self._errors as error:
            # The leases run on; the next tick tries again well before they expire.
            logger.warning("could not renew leases (%s)", type(error).__name__)
            return
        for lease in leases:
            if lease.operation_id in kept:
                lease.fence.confirm(sent_at)
            else:
                lease.fence.revoke()
                self.release(lease)
        if self._keystore is not None:
            tokens = [
                (lease.scope, lease.key, lease.store_token)
                for lease in leases
                if lease.operation_id in kept and lease.store_token is not None
            ]
            if tokens:
                await self._keystore.renew(tokens, self._lease_seconds)
