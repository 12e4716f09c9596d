"""Judging leases on a ledger without a clock of its own, by what this process has watched.

SQLite has no server clock, and the processes sharing its file may disagree about the wall-clock
time (a clock step, a container or a process with an offset clock): a process 30 s ahead would
read every live lease as expired. So on SQLite a lease counts as run out only once this process
has seen it unchanged — same owner, same expiry as its writer last renewed it — for a whole
lease, measured on this process's monotonic clock. A live writer renews three times a lease, so
its lease is never seen unchanged that long; a crashed or frozen one is, whatever any clock says.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime

from writesafe.ledger._clock import Clock
from writesafe.ledger._records import OperationRecord

_WATCHED = 10_000  # leases remembered at once; the oldest sightings are forgotten first


class LeaseWatch:
    """Sightings of `in_flight` leases, each with when this process first saw it as it is."""

    def __init__(self, clock: Clock, lease_seconds: float) -> None:
        self._clock = clock
        self._lease = lease_seconds
        self._seen: OrderedDict[int, tuple[tuple[str | None, datetime | None], float]] = (
            OrderedDict()
        )

    def seconds_left(self, operation: OperationRecord) -> float:
        """How long `operation`'s lease must still be seen unchanged before it has run out (0:
        it has). A lease seen for the first time, or renewed since, has a whole lease left."""
        if operation.lease_expires_at is None:
            return 0.0  # an in_flight row without a lease has nothing to wait for
        lease = (operation.lease_owner, operation.lease_expires_at)
        now = self._clock.monotonic()
        seen = self._seen.get(operation.id)
        if seen is None or seen[0] != lease:
            self._seen[operation.id] = (lease, now)
            self._seen.move_to_end(operation.id)
            while len(self._seen) > _WATCHED:
                self._seen.popitem(last=False)
            return self._lease
        return max(0.0, seen[1] + self._lease - now)

    def forget(self, operation_id: int) -> None:
        self._seen.pop(operation_id, None)
