"""One reconciliation pass at a time on SQLite: an exclusive lock on a file beside the database.

SQLite has no `SKIP LOCKED`, so two passes would only queue on its write lock and look the same
operations up twice. The lock is held for a pass, not for a process's life, so a service, an app
and `writesafe reconcile --once` can take turns on one ledger; a pass that starts while another
process's pass runs is refused at once with a message that says what to do.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


class ReconcilerBusy(RuntimeError):
    """Another process's reconciliation pass holds this SQLite ledger; try again when it ends, or
    move the ledger to PostgreSQL."""


class SingleWorkerLock:
    """An exclusive, non-blocking `flock` held while a pass runs.

    The kernel drops it when the process dies, so a crashed worker never blocks its successor.
    Passes of one reconciler that overlap (two `POST /v1/reconcile` at once) share it: they are
    one process's work, and the last one to end releases it.
    """

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".reconcile.lock")
        self._fd: int | None = None
        self._passes = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lock for one pass; raise `ReconcilerBusy` if another process holds it."""
        if self._passes == 0:
            self._acquire()
        self._passes += 1
        try:
            yield
        finally:
            self._passes -= 1
            if self._passes == 0:
                self._release()

    def _acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ReconcilerBusy(
                f"another reconciliation pass is running against this SQLite ledger (it holds "
                f"{self.path}); SQLite runs one reconciler at a time — try again when that pass "
                "ends, or use PostgreSQL to run many workers"
            ) from None
        self._fd = fd

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None
