"""A process held to a share of one core: a small machine's model of a large one's core per process.

Issue 30 asks whether 4 processes make more first executions than one at equal callers "on a
machine with the cores for it". On 2 cores shared with the database that cannot be seen: every
layout runs out of cores. Holding each benchmark process to the same fraction of a core (the
kernel's CFS quota, in a cgroup of its own) leaves cores to spare: 4 processes then fall short of
4 × one only where something besides their own CPU holds them back (a pool, a lock or a writer
shared between callers, or the database). It models cores that are slower, not more of them, and
the database is not held.
Needs root and the cgroup `cpu` controller (v1 at `/sys/fs/cgroup/cpu`, or v2's `cpu.max`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

# The quota's period. The kernel's default, 100 ms, lets a held process run 25 ms and then
# stall 75 ms at a quarter of a core: a stall as long as many calls. 10 ms keeps it short.
PERIOD_US = 10_000

_V1 = Path("/sys/fs/cgroup/cpu")
_V2 = Path("/sys/fs/cgroup")


class CoreShareUnavailable(RuntimeError):
    """This machine, or this user, cannot hold a process to a share of a core."""


def core_share(text: str) -> float:
    """`--core-share`'s value: a share of one core, in (0, 1]."""
    share = float(text)
    if not 0 < share <= 1:
        raise argparse.ArgumentTypeError(f"a core share is in (0, 1], not {text}")
    return share


def check_available() -> None:
    """Make and remove a group, so that a run that cannot hold its processes stops before it
    starts any: raises `CoreShareUnavailable` saying why."""
    with core_share_group(1.0):
        pass


def _parent() -> tuple[Path, bool]:
    """Where this machine's CPU cgroups are made, and whether they are cgroup v2's."""
    if (_V1 / "cpu.cfs_quota_us").exists():
        return _V1, False
    controllers = _V2 / "cgroup.subtree_control"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return _V2, True
    raise CoreShareUnavailable(
        "--core-share needs the cgroup cpu controller (v1 at /sys/fs/cgroup/cpu, or v2 with cpu "
        "in /sys/fs/cgroup/cgroup.subtree_control) and root"
    )


@contextlib.contextmanager
def core_share_group(share: float) -> Iterator[Path]:
    """A new cgroup whose processes together may use `share` of one core; removed at the end,
    once the processes that `join`ed it have exited."""
    parent, v2 = _parent()
    group = parent / f"writesafe-bench-{uuid.uuid4().hex[:12]}"
    quota = max(int(share * PERIOD_US), 1_000)  # the kernel's smallest quota is 1 ms
    try:
        group.mkdir()
        if v2:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
    except PermissionError as error:
        raise CoreShareUnavailable(f"--core-share needs root: {error}") from error
    try:
        yield group
    finally:
        group.rmdir()


def join(group: Path) -> None:
    """Move the calling process, with the threads it starts from now on, into `group`."""
    (group / "cgroup.procs").write_text(str(os.getpid()))
