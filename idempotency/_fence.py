"""The send-time fence: a writer may start a send only while its lease is surely still its own.

A lease alone cannot stop a writer that pauses past its expiry (a blocked event loop, a GC pause,
SIGSTOP, a VM suspension) and then sends: by then another caller may hold the key. So each
execution carries a fence whose deadline is derived from the last *confirmed* lease write minus a
margin, on this process's monotonic clock. Checking it is local and costs no I/O, so a tool (or
the httpx integration) checks it immediately before every send. The same deadline bounds the
tool's task: when it passes, or a renewal is refused, the task is cancelled. The tool's own
timeout shares that one timer (`run_for`): an `asyncio.timeout` costs about 30k instructions a
call (its timer handle and the heap's Python comparisons), a tenth of the guard's own work.
"""

from __future__ import annotations

import asyncio
import math
import time
from types import TracebackType

MARGIN_FRACTION = 0.2
"""The part of a lease the fence gives up: it closes this much before the lease can expire."""


class LeaseLost(Exception):
    """The fence refused a send: this execution's lease may already belong to another caller.

    `sent_before`: an earlier send of the same execution was admitted, so it may have had an
    effect; otherwise this execution provably sent nothing through the fence.
    """

    def __init__(self, key: str, *, sent_before: bool) -> None:
        verb = "after an earlier send" if sent_before else "before anything was sent"
        super().__init__(f"the lease on key {key!r} may have run out ({verb}); the send is refused")
        self.key = key
        self.sent_before = sent_before


class Fence:
    """One execution's right to send, until `deadline` on `time.monotonic()`.

    `token` is the fencing token forwarded downstream: the execution number, which grows with
    every execution of an operation, so a downstream that keeps the highest it has seen per key
    can refuse a stale writer.
    """

    def __init__(self, key: str, token: int, leased_at: float, lease_seconds: float) -> None:
        self.key = key
        self.token = token
        self._lease = lease_seconds
        self._deadline = leased_at + lease_seconds * (1 - MARGIN_FRACTION)
        self._sends = 0  # sends admitted and not withdrawn: each may have gone out
        self._scope: asyncio.Timeout | None = None  # while the tool runs inside the fence
        self._limit = math.inf  # the loop time the tool's own timeout ends the run inside
        self._limit_first = False  # the run's timer is set for the tool's timeout, not the fence
        self._ended_task = False
        self._timed_out = False

    @property
    def deadline(self) -> float:
        return self._deadline

    @property
    def admitted(self) -> bool:
        """True once a send has been admitted (and not withdrawn): the execution may have had an
        effect."""
        return self._sends > 0

    def is_open(self) -> bool:
        return time.monotonic() < self._deadline

    def admit(self) -> None:
        """Admit one send now, or raise `LeaseLost`; call it immediately before each send."""
        if not self.is_open():
            raise LeaseLost(self.key, sent_before=self.admitted)
        self._sends += 1

    def recheck(self) -> None:
        """Check an admitted send again as its first byte is about to be written: past the
        deadline it is withdrawn (nothing of it went out) and refused with `LeaseLost`."""
        if not self.is_open():
            self._sends -= 1
            raise LeaseLost(self.key, sent_before=self.admitted)

    def check(self) -> None:
        """Raise `LeaseLost` unless the fence is open, without admitting a send (the guard's own
        check before it invokes the tool)."""
        if not self.is_open():
            raise LeaseLost(self.key, sent_before=self.admitted)

    def confirm(self, leased_at: float) -> None:
        """A lease write sent at `leased_at` (monotonic) was confirmed: the fence moves to its
        end, minus the margin. The store set the lease no earlier than the write was sent."""
        self._deadline = max(self._deadline, leased_at + self._lease * (1 - MARGIN_FRACTION))
        self._reschedule()

    def revoke(self) -> None:
        """The lease is gone (a renewal was refused): close the fence and end the task now."""
        self._deadline = -math.inf
        self._reschedule()

    def run_for(self, timeout: float | None) -> Fence:
        """Bound the next run inside the fence (`async with`) by the tool's `timeout` (seconds from
        now; None: no timeout) as well: its task is cancelled at whichever comes first."""
        self._limit = math.inf if timeout is None else asyncio.get_running_loop().time() + timeout
        return self

    async def __aenter__(self) -> Fence:
        """Run the tool inside the fence: its task is cancelled when the fence closes, or when
        the timeout `run_for` gave runs out."""
        self._scope = asyncio.timeout_at(self._run_deadline())
        await self._scope.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        scope, self._scope = self._scope, None
        assert scope is not None
        try:
            await scope.__aexit__(exc_type, exc, traceback)
        finally:
            expired = scope.expired()
            self._ended_task = expired and not self._limit_first
            self._timed_out = expired and self._limit_first
            self._limit = math.inf

    def closed_the_task(self) -> bool:
        """True when the fence, not the tool, ended the last run inside it."""
        return self._ended_task

    def timed_out(self) -> bool:
        """True when the tool's timeout (`run_for`) ended the last run inside the fence."""
        return self._timed_out

    def _reschedule(self) -> None:
        if self._scope is not None and not self._scope.expired():
            self._scope.reschedule(self._run_deadline())

    def _run_deadline(self) -> float:
        """When the run inside ends, on the loop's clock: at the fence's deadline or the tool's
        timeout, whichever is first, noting which one the timer is for."""
        fence = self._loop_deadline()
        self._limit_first = self._limit < fence
        return min(fence, self._limit)

    def _loop_deadline(self) -> float:
        # The event loop's clock need not be `time.monotonic()` itself (uvloop has its own).
        loop = asyncio.get_running_loop()
        if self._deadline == -math.inf:
            return loop.time()
        return loop.time() + (self._deadline - time.monotonic())
