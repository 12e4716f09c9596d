"""A process whose wall clock is off by a fixed offset, through libfaketime (no hook in our code).

libfaketime (Debian's `faketime` package) is preloaded into the child and offsets what
`clock_gettime(CLOCK_REALTIME)`, `time()` and `gettimeofday()` return: `datetime.now()` and
`time.time()` are skewed. The monotonic clock is left alone (`DONT_FAKE_MONOTONIC`): a skew that
also moved `time.monotonic()` would be a different fault (a jump of every local deadline), and with
it libfaketime 0.9.10 hangs Python's timed waits (`threading.Event.wait`; libfaketime issue #390).
Known gap of 0.9.10 with the monotonic clock left alone: `time.sleep` fails with EINVAL
(libfaketime issue #426); the chaos processes are asyncio and never call it.
"""

from __future__ import annotations

import contextlib
import glob
import re
import shutil
from pathlib import Path

import psutil

LIBRARY_GLOBS = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


class FaketimeMissing(RuntimeError):
    """Clock skew was asked for and libfaketime is not installed."""


def _installed_library() -> str | None:
    for pattern in LIBRARY_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def faketime_installed() -> bool:
    """Whether a run can skew its processes' clocks (the tests skip a skewed run otherwise)."""
    return _installed_library() is not None


def libfaketime() -> str:
    library = _installed_library()
    if library is None:
        hint = "" if shutil.which("apt-get") is None else " (apt-get install -y faketime)"
        raise FaketimeMissing(f"clock skew needs libfaketime{hint}; or run with --skew 0")
    return library


def skewed(env: dict[str, str], seconds: float) -> dict[str, str]:
    """`env` for a child whose wall clock runs `seconds` ahead (negative: behind)."""
    if seconds == 0:
        return env
    return {
        **env,
        "LD_PRELOAD": libfaketime(),
        "FAKETIME": f"{seconds:+g}s",
        "DONT_FAKE_MONOTONIC": "1",  # libfaketime 0.9.10's name
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # later versions' name
    }


# Where libfaketime keeps each process's shared state: a segment and a semaphore named by its pid.
_STATE = Path("/dev/shm")
_STATE_NAME = re.compile(r"(?:faketime_shm|sem\.faketime_sem)_(\d+)")


def sweep_stale_state() -> int:
    """Remove what libfaketime left in /dev/shm for processes that are gone; how many entries.

    A process with libfaketime loaded (and the `faketime` wrapper) removes its state as it exits;
    one killed by a signal, as the chaos run kills its skewed workers, leaves it behind. A later
    `faketime` wrapper that is given the same pid then refuses to start (`faketime: sem_open:
    File exists`), which failed `tests/test_one_clock.py` in CI. State of a live pid is kept.
    """
    removed = 0
    for entry in _STATE.glob("*faketime*"):
        match = _STATE_NAME.fullmatch(entry.name)
        if match is None or psutil.pid_exists(int(match.group(1))):
            continue
        with contextlib.suppress(FileNotFoundError):  # another sweep took it first
            entry.unlink()
            removed += 1
    return removed
