"""The connections of the PostgreSQL writer: an idle list, a queue of waiters and three timers.

asyncpg's pool hands a connection back through `asyncio.shield`, which costs a task and a loop
iteration on every release (about 60 µs of CPU per statement here, a tenth of a guarded call).
The writer needs less than a general pool: its statements run in autocommit and leave no session
state, so a connection can be reused as it is. One that failed in any way is closed instead,
together with the idle ones when the failure was the connection itself (a restarted server or a
terminated backend takes its siblings with it). One left unused for `idle_seconds` is closed, so
that a burst does not hold the shared server's connections for good. A caller waiting for a
connection waits in turn, handed its slot by the release before it; the waits share one timer,
since each ends `wait_seconds` after it began and the first to begin is the first to end (a
timer per wait, as `asyncio.timeout` sets, was 6 % of a first execution's instructions while
the pool was busy). A connection is lent for one statement, and the statements' deadlines share
one timer (`TaskDeadlines`): the driver's own `command_timeout` arms a timer per statement, 4 %
of a first execution's instructions (docs/performance.md). A statement lent past its deadline is
cancelled as `asyncio.timeout` cancels it (its task is cancelled) and raised as `TimeoutError`,
as the driver's own timeout was. A cancelled statement's connection is closed once the server
has been asked to stop the statement, not cut off at once: cut off, the server would go on
with it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping
from typing import Any

import asyncpg
from sqlalchemy.exc import TimeoutError as PoolTimeout

from writesafe.ledger._task_deadlines import Deadline, TaskDeadlines

# Failures of the connection rather than of the statement. A backend ended by the server (an
# administrator's pg_terminate_backend, a shutdown, a crash) seldom goes alone: its idle siblings
# are likely ended too, and one reused before its socket reports the close fails at its next
# statement with asyncpg's InternalClientError.
_BROKEN: tuple[type[BaseException], ...] = (
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    OSError,
)


# How long a connection being closed may take to have its cancelled statement stopped and to
# say goodbye to the server before it is cut off (seconds).
_CLOSE_SECONDS = 2.0


class ConnectionPool:
    """At most `size` asyncpg connections, opened on demand, reused newest first, closed after
    `idle_seconds` unused; a caller waits up to `wait_seconds` while `size` are in use. The
    `command_timeout` of `connect` bounds each statement, enforced here (see the module)."""

    def __init__(
        self, connect: Mapping[str, Any], size: int, idle_seconds: float, wait_seconds: float
    ) -> None:
        self._statement_seconds: float | None = connect.get("command_timeout")
        self._connect = {**connect, "command_timeout": None}
        self._size, self._idle_seconds, self._wait_seconds = size, idle_seconds, wait_seconds
        self._in_use = 0  # slots taken, including those handed to a waiter not yet resumed
        self._waiters: deque[tuple[float, asyncio.Future[None]]] = deque()  # (deadline, it)
        self._expiry: asyncio.TimerHandle | None = None  # at the first waiter's deadline
        self._idle: list[tuple[float, asyncpg.Connection]] = []  # (when it was last used, it)
        self._timer: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._lent: dict[asyncpg.Connection, Deadline] = {}  # each lent one's statement's
        self._deadlines = TaskDeadlines()

    async def acquire(self) -> asyncpg.Connection:
        """An idle connection, or a new one, lent for one statement from now; wait while `size`
        are in use."""
        if self._in_use < self._size:  # taken without suspending
            self._in_use += 1
        else:
            await self._wait_for_slot()
        try:
            connection = (
                self._idle.pop()[1] if self._idle else await asyncpg.connect(**self._connect)
            )
        except BaseException:
            self._free_slot()
            raise
        if self._statement_seconds is not None:
            self._lend(connection, self._statement_seconds)
        return connection

    def release(self, connection: asyncpg.Connection) -> None:
        """Return a connection whose statement completed."""
        if (lent := self._lent.pop(connection, None)) is not None:
            lent.end()
        if not connection.is_closed():
            loop = asyncio.get_running_loop()
            self._idle.append((loop.time(), connection))
            if self._timer is None:
                self._timer = loop.call_later(self._idle_seconds, self._close_unused)
        self._free_slot()

    def discard(self, connection: asyncpg.Connection, error: BaseException) -> TimeoutError | None:
        """Close a connection whose statement failed or was cancelled: its state is unknown.
        Returns the `TimeoutError` to raise instead of `error` when this pool cancelled the
        statement at its deadline (and its task is not being cancelled from elsewhere too)."""
        lent = self._lent.pop(connection, None)
        timed_out = lent is not None and lent.end()
        if not isinstance(error, asyncio.CancelledError):
            connection.terminate()
            if isinstance(error, _BROKEN):
                self._terminate_idle()
            self._free_slot()
            return None
        # The driver is asking the server to stop the statement. Cut off at once, the connection
        # would drop that request, and the server would go on with the statement (one waiting
        # on a lock waits on, holding its backend). The connection keeps its slot until it is
        # closed: the budget counts it while it is open.
        self._close_soon(connection).add_done_callback(lambda _: self._free_slot())
        if timed_out:
            return TimeoutError(f"the statement ran past {self._statement_seconds:g}s")
        return None

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # The expiry and deadlines' timers stay: waits still run out, statements keep their bound.
        idle, self._idle = self._idle, []
        closing = [connection.close() for _, connection in idle]
        await asyncio.gather(*closing, *self._closing, return_exceptions=True)

    async def _wait_for_slot(self) -> None:
        """Wait in turn for a slot, at most `wait_seconds`; a slot handed over stays taken."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append((loop.time() + self._wait_seconds, waiter))
        if self._expiry is None:
            self._expiry = loop.call_at(self._waiters[0][0], self._expire_waits)
        try:
            await waiter
        except asyncio.CancelledError:
            # Handed the slot, then cancelled before it resumed: pass it on. (A wait that ran
            # out, then was cancelled, holds none.)
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._free_slot()
            raise
        except TimeoutError:
            # Raised as SQLAlchemy's pool raises it, so both pools of the budget read alike.
            raise PoolTimeout(
                f"all {self._size} writer connections of the connection budget stayed in use "
                f"for {self._wait_seconds:g}s"
            ) from None

    def _free_slot(self) -> None:
        """Hand a slot to the caller waiting longest, or free it."""
        waiters = self._waiters
        while waiters:
            _, waiter = waiters.popleft()
            if not waiter.done():  # else it was cancelled, or its wait ran out
                waiter.set_result(None)
                return
        self._in_use -= 1

    def _expire_waits(self) -> None:
        """End the waits whose time is up; look again at the next deadline."""
        self._expiry = None
        loop = asyncio.get_running_loop()
        now, waiters = loop.time(), self._waiters
        while waiters and (waiters[0][1].done() or waiters[0][0] <= now):
            _, waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_exception(TimeoutError())
        if waiters:
            self._expiry = loop.call_at(waiters[0][0], self._expire_waits)

    def _lend(self, connection: asyncpg.Connection, seconds: float) -> None:
        task = asyncio.current_task()
        if task is None:  # a statement awaited outside any task cannot be cancelled alone
            return
        loop = task.get_loop()
        lent = self._lent[connection] = Deadline(self._deadlines, loop)
        lent.start(task, loop.time() + seconds)

    def _close_unused(self) -> None:
        """Close the connections unused for `idle_seconds`; look again when the next one is."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._idle and now - self._idle[0][0] >= self._idle_seconds:
            _, connection = self._idle.pop(0)
            self._close_soon(connection)
        if self._idle:
            wait = self._idle[0][0] + self._idle_seconds - now
            self._timer = loop.call_later(wait, self._close_unused)

    def _close_soon(self, connection: asyncpg.Connection) -> asyncio.Task[None]:
        """Close `connection` politely, behind the caller; `close` waits for it."""
        task = asyncio.get_running_loop().create_task(_close(connection))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        return task

    def _terminate_idle(self) -> None:
        idle, self._idle = self._idle, []
        for _, connection in idle:
            connection.terminate()


async def _close(connection: asyncpg.Connection) -> None:
    """Close a connection politely: its cancelled statement, if any, stopped by the server
    first (asyncpg waits for that), then a goodbye; one that broke meanwhile is closed already,
    one that takes longer than `_CLOSE_SECONDS` is cut off."""
    with contextlib.suppress(Exception):
        await connection.close(timeout=_CLOSE_SECONDS)
