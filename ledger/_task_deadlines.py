"""One event-loop timer for the deadlines of many tasks, each cancelled as `asyncio.timeout` does.

A timer per deadline (`asyncio.timeout`, asyncpg's `command_timeout`) pushes a handle on the
loop's heap and later pops it off, with Python comparisons each way, and cancelled handles make
the loop re-heapify: about 35k instructions per guarded call for the tool's run, and 4 % of a
first execution for the writer's statements (docs/performance.md). What a deadline bounds nearly
always ends long before it, so here a deadline is one dict entry, and the one timer is moved only
for a deadline earlier than the one it is set for. A deadline that ends leaves the timer as it
is; when it fires, it cancels the tasks whose deadlines have come and is set again for the next.
The runs inside fences on a guard's loop share one (`idempotency._fence`), and the statements
of the PostgreSQL writer's pool another (`_pg_connections`).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any


class TaskDeadlines:
    """The deadlines, on the loop's clock, of tasks on one event loop, and the timer for the
    earliest."""

    def __init__(self) -> None:
        self._deadlines: dict[Deadline, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def watch(self, deadline: Deadline, at: float) -> None:
        """Expire `deadline` at `at` (a past time: at the loop's next turn); watching it again
        moves it."""
        self._deadlines[deadline] = at
        if at < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = deadline.loop.call_at(at, self._expire_due, deadline.loop)
            self._timer_at = at

    def unwatch(self, deadline: Deadline) -> None:
        self._deadlines.pop(deadline, None)

    def _expire_due(self, loop: asyncio.AbstractEventLoop) -> None:
        """Expire each deadline that has come; set the timer for the next."""
        self._timer, self._timer_at = None, math.inf
        now = loop.time()
        due = [deadline for deadline, at in self._deadlines.items() if at <= now]
        for deadline in due:
            del self._deadlines[deadline]
            deadline.expire()
        if self._deadlines:
            next_at = min(self._deadlines.values())
            self._timer = loop.call_at(next_at, self._expire_due, loop)
            self._timer_at = next_at


class Deadline:
    """When a task on `loop` is cancelled unless it ends first, with `asyncio.timeout`'s
    bookkeeping of which cancel was this deadline's; `deadlines` keep the time."""

    __slots__ = ("_cancelling", "_deadlines", "_task", "expired", "loop")

    def __init__(self, deadlines: TaskDeadlines, loop: asyncio.AbstractEventLoop) -> None:
        self._deadlines, self.loop = deadlines, loop
        self.expired = False

    def start(self, task: asyncio.Task[Any], at: float) -> None:
        """Cancel `task` at `at`, the loop's time."""
        self._task, self._cancelling = task, task.cancelling()
        self._deadlines.watch(self, at)

    def move(self, at: float) -> None:
        if not self.expired:
            self._deadlines.watch(self, at)

    def expire(self) -> None:
        self.expired = True
        self._task.cancel()

    def end(self) -> bool:
        """End the deadline; True when it cancelled its task and nothing else did: the task's
        `CancelledError` is then this deadline's, to be raised as a `TimeoutError`."""
        self._deadlines.unwatch(self)
        return self.expired and self._task.uncancel() <= self._cancelling
