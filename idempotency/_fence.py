"""The send-time fence: a writer may start a send only while its lease is surely still its own.

A lease alone cannot stop a writer that pauses past its expiry (a blocked event loop, a GC pause,
SIGSTOP, a VM suspension) and then sends: by then another caller may hold the key. So each
execution carries a fence whose deadline is derived from the last *confirmed* lease write minus a
margin, on this process's monotonic clock. Checking it is local and costs no I/O, so a tool (or
the httpx integration) checks it immediately before every send. The same deadline bounds the
tool's task: when it passes, or a renewal is refused, the task is cancelled. The tool's own
timeout shares that deadline (`running`), and the deadlines of every run on the loop share one
timer (`TaskDeadlines`): a timer per run cost about 35k instructions a call.
"""

from __future__ import annotations

import asyncio
import math
import time
from types import TracebackType

from writesafe.ledger._task_deadlines import Deadline, TaskDeadlines

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
        self._run: Deadline | None = None  # while the tool runs inside the fence
        self._limit = math.inf  # the loop time the tool's own timeout ends the run inside
        self._limit_first = False  # the run's deadline is the tool's timeout, not the fence's
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

    def running(self, deadlines: TaskDeadlines, timeout: float | None) -> Fence:
        """Run the tool inside the fence (`with`): its task is cancelled when the fence closes,
        or when its `timeout` (seconds from now; None: none) runs out, whichever comes first;
        the loop's `deadlines` keep the time."""
        loop = asyncio.get_running_loop()
        self._limit = math.inf if timeout is None else loop.time() + timeout
        self._run = Deadline(deadlines, loop)
        return self

    def __enter__(self) -> Fence:
        run = self._run
        assert run is not None, "entered through `running`"
        task = asyncio.current_task(run.loop)
        if task is None:
            raise RuntimeError("a fence runs its tool inside a task")
        run.start(task, self._run_deadline(run.loop))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        run, self._run = self._run, None
        assert run is not None
        expired = run.expired
        self._ended_task = expired and not self._limit_first
        self._timed_out = expired and self._limit_first
        self._limit = math.inf
        if run.end() and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc  # as `asyncio.timeout` does: the run's cancel was ours

    def closed_the_task(self) -> bool:
        """True when the fence, not the tool, ended the last run inside it."""
        return self._ended_task

    def timed_out(self) -> bool:
        """True when the tool's timeout (`running`) ended the last run inside the fence."""
        return self._timed_out

    def _reschedule(self) -> None:
        run = self._run
        if run is not None:
            run.move(self._run_deadline(run.loop))

    def _run_deadline(self, loop: asyncio.AbstractEventLoop) -> float:
        """When the run inside ends, on the loop's clock: at the fence's deadline or the tool's
        timeout, whichever is first, noting which one the timer is for."""
        fence = self._loop_deadline(loop)
        self._limit_first = self._limit < fence
        return min(fence, self._limit)

    def _loop_deadline(self, loop: asyncio.AbstractEventLoop) -> float:
        # The event loop's clock need not be `time.monotonic()` itself (uvloop has its own).
        if self._deadline == -math.inf:
            return loop.time()
        return loop.time() + (self._deadline - time.monotonic())
