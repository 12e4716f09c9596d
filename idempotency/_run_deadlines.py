"""One event-loop timer for the deadlines of every run inside a fence on the loop.

A timer per run (`asyncio.timeout`) pushes a timer handle on the loop's heap and later pops it off,
with Python comparisons each way, and cancelled handles make the loop re-heapify: about 35k
instructions per guarded call, 3.5 % of a first execution on PostgreSQL (bench/instructions.py).
Runs nearly always end long before their deadlines, so here a run is one dict entry, and the one
timer is moved only for a deadline earlier than the one it is set for. A run that ends leaves
the timer as it is; when it fires, it ends the runs that are due and is set again for the next.
"""

from __future__ import annotations

import asyncio
import math
from typing import Protocol


class Run(Protocol):
    """What a deadline ends: the run's task is cancelled by `expire`."""

    def expire(self) -> None: ...


class RunDeadlines:
    """The deadlines, on the loop's clock, of the runs on one event loop (the guard keeps one
    per loop it serves), and the timer for the earliest."""

    def __init__(self) -> None:
        self._deadlines: dict[Run, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def watch(self, run: Run, deadline: float, loop: asyncio.AbstractEventLoop) -> None:
        """End `run` at `deadline` (a past one: at the loop's next turn); watching a run again
        moves its deadline."""
        self._deadlines[run] = deadline
        if deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(deadline, self._end_due_runs, loop)
            self._timer_at = deadline

    def unwatch(self, run: Run) -> None:
        """`run` is over: it has no deadline any more."""
        self._deadlines.pop(run, None)

    def _end_due_runs(self, loop: asyncio.AbstractEventLoop) -> None:
        """End each run whose deadline has come; set the timer for the next deadline."""
        self._timer, self._timer_at = None, math.inf
        now = loop.time()
        due = [run for run, deadline in self._deadlines.items() if deadline <= now]
        for run in due:
            del self._deadlines[run]
            run.expire()
        if self._deadlines:
            next_deadline = min(self._deadlines.values())
            self._timer = loop.call_at(next_deadline, self._end_due_runs, loop)
            self._timer_at = next_deadline
