"""The shortest retention that cannot forget a key while its write may still land.

A final operation is pruned once its retention has passed, and its key is then new. While a
writer may still hold the key's lease (and send until its fence closes), or a slow write may
still land within the tool's settle window, forgetting the key would let a second execution run
beside the first. So the retention must be at least the longest lease plus the settle window.
"""

from __future__ import annotations


def retention_refusal(retention: float, lease_seconds: float, settle_after: float) -> str | None:
    """Why `retention` (seconds) is too short for a `lease_seconds` lease and a `settle_after`
    window, in one line; None when it is long enough."""
    floor = lease_seconds + settle_after
    if retention >= floor:
        return None
    return (
        f"retention {retention:g}s is shorter than the lease ({lease_seconds:g}s) plus the settle "
        f"window ({settle_after:g}s): a pruned key could run again while its write may still "
        f"land; set WRITESAFE_RETENTION to at least {floor:g}"
    )
