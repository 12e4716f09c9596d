"""Writer stalls: processes stopped (SIGSTOP) and continued (SIGCONT) after more than a lease.

A process is stopped either by the fault driver at a random moment, or by itself: the chaos tool
stops its own process just before it sends, where the plan says so. Either way this keeper
notices the stop and continues the process when its stall is over, as a long GC pause, a blocked
event loop or a suspended VM would end.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections import Counter

import psutil


class Stalls:
    """Continues every stopped process it is told about, or finds, once its stall is over."""

    def __init__(self, rng: random.Random, shortest: float, longest: float) -> None:
        self._rng = rng
        self._shortest = shortest
        self._longest = longest
        self._until: dict[int, float] = {}  # pid → monotonic time to continue it
        self.counts: Counter[str] = Counter()  # stalls by who stopped the process

    def stop(self, pid: int) -> None:
        """Stop `pid` now (the driver's stall)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
            self._until[pid] = time.monotonic() + self._duration()
            self.counts["driver"] += 1

    def tick(self, pids: list[int]) -> None:
        """Adopt the processes among `pids` that stopped themselves; continue each one whose
        stall is over."""
        now = time.monotonic()
        for pid in pids:
            if pid not in self._until and _stopped(pid):
                self._until[pid] = now + self._duration()
                self.counts["self"] += 1
        for pid, until in list(self._until.items()):
            if until <= now:
                self.resume(pid)

    def holds(self, pid: int) -> bool:
        return pid in self._until

    def resume(self, pid: int) -> None:
        self._until.pop(pid, None)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    def resume_all(self) -> None:
        for pid in list(self._until):
            self.resume(pid)

    def _duration(self) -> float:
        return self._rng.uniform(self._shortest, self._longest)


def _stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False
