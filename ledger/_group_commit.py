"""Group commit: the writes that queue for one writer thread while it is busy, taken as one group.

A commit's cost is mostly its fsync, and the disk syncs eight rows in one transaction at about
seven times the rate of eight transactions (docs/performance.md). So the callers of the embedded
writer queue their writes here, and the first of them into an empty queue posts one drain to the
writer's thread; when the thread reaches it, it takes every write queued by then and commits them
together. A lone caller's write is taken at once: nothing ever waits for a group to fill. The
queue also tells when a write would most likely commit alone (`quiet`), so that it can run on its
caller's thread instead (where `ledger._sqlite_writer` says), without the two hops, and without
taking the lock from under a drain about to begin.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from writesafe.ledger._call_thread import settle

Answer = tuple[Any, BaseException | None]  # a write's result, or the error that kept it out


@dataclass(frozen=True, slots=True)
class Member:
    """One caller's write in a group: what it runs on the transaction's cursor, whether its commit
    must be durable, and the future of its caller's event loop that takes its answer."""

    write: Callable[[Any], Any]
    durable: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


class GroupQueue:
    """The writes waiting for the writer's thread, from any thread and event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: list[Member] = []
        self._drains = 0  # posted and not yet through their transaction
        self._last_group = 0  # how many writes the last drain took

    def add(self, member: Member) -> bool:
        """Queue `member`; True if the queue was empty, so a drain must be posted for it (a
        queue that was not empty has a drain posted that has not taken it yet)."""
        with self._lock:
            self._members.append(member)
            posts = len(self._members) == 1
            self._drains += posts
            return posts

    @contextlib.contextmanager
    def draining(self) -> Iterator[list[Member]]:
        """Every write queued so far, but those whose callers were cancelled before it started
        (as an executor skips a cancelled work item); the queue is empty after. The drain that
        took them counts as running until the block ends: end it when the transaction has, and
        before the callers are answered, who may write again at once."""
        with self._lock:
            members, self._members = self._members, []
            self._last_group = len(members)
        try:
            # A read of a future's state, which its loop's thread alone writes.
            yield [member for member in members if not member.future.cancelled()]
        finally:
            with self._lock:
                self._drains -= 1

    def quiet(self) -> bool:
        """No drain is posted or running (none is about to take the write lock), and the last
        one took a lone write: a write now would most likely commit alone. A hint, read without
        the lock, for a caller that gives way to a busy lock anyway."""
        return self._drains == 0 and self._last_group <= 1


def answer(members: Sequence[Member], answers: Sequence[Answer]) -> None:
    """Settle each member's future with its answer, on its loop's thread (the only one that may):
    one wake-up of each loop for the whole group, not one per member."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Answer]]] = {}
    for member, one in zip(members, answers, strict=True):
        by_loop.setdefault(member.loop, []).append((member.future, one))
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the caller's loop has closed meanwhile
            loop.call_soon_threadsafe(_settle_all, settled)


def _settle_all(settled: list[tuple[asyncio.Future[Any], Answer]]) -> None:
    for future, (result, error) in settled:
        settle(future, result, error)
