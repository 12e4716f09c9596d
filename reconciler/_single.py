"""One reconciler at a time on SQLite: an exclusive lock on a file beside the database.

SQLite has no `SKIP LOCKED`, so two workers would only queue on its write lock and look the same
operations up twice. A second worker is refused at once with a message that says what to do.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class ReconcilerBusy(RuntimeError):
    """Another reconciler holds this SQLite ledger; run one, or move the ledger to PostgreSQL."""


class SingleWorkerLock:
    """An exclusive, non-blocking `flock` held for as long as this reconciler lives.

    The kernel drops it when the process dies, so a crashed worker never blocks its successor.
    """

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".reconcile.lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ReconcilerBusy(
                f"another reconciler is already running against this SQLite ledger (it holds "
                f"{self.path}); SQLite supports one reconciler at a time — stop the other one, "
                "or use PostgreSQL to run many workers"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None
