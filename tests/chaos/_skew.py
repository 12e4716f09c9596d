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

import glob
import shutil

LIBRARY_GLOBS = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


class FaketimeMissing(RuntimeError):
    """Clock skew was asked for and libfaketime is not installed."""


def libfaketime() -> str:
    for pattern in LIBRARY_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    hint = "" if shutil.which("apt-get") is None else " (apt-get install -y faketime)"
    raise FaketimeMissing(f"clock skew needs libfaketime{hint}; or run with --skew 0")


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
