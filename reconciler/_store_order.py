"""Which store a guarded call asks first: Redis while its tool's calls are often repeats.

Redis answers a repeat (a finished key's replay, a key busy under another caller) in one round
trip that never reaches the ledger; on a first execution its claim is a round trip spent before
the ledger claim that decides anyway, and on a client short of CPU its cost comes out of every
call (issue 30: pg+redis 0.5–0.8× pg alone on first executions). A PostgreSQL claim answers a
repeat too, in one round trip that returns the held row, at about twice the cost of Redis's. So
each tool keeps a running share of repeats among its recent calls, and a call asks Redis first
only while that share is at least `threshold`; a call that asks the ledger first leaves Redis
alone (no lease, no copy: the first repeat that asks Redis fills it from the ledger). The
embedded ledger's read without a write (`peek`) is asked first by the same rule: it answers a
repeat without the writer's thread, and a new key's read is a query spent for nothing, dearer
still beside the writer's busy thread (the GIL's hand-offs). Either order is safe: the ledger's
claim decides every execution.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoreOrder:
    """The policy: ask Redis first (or the embedded ledger's read) while at least `threshold`
    of a tool's recent calls were repeats, the share moving by `weight` per call (an exponential
    average over about 1/weight calls). A tool not seen yet starts at `start`: Redis first, as a
    process's first calls may well be a retrying client's."""

    threshold: float = 0.25
    weight: float = 1 / 32
    start: float = 1.0

    def asks_first(self, share: float) -> bool:
        """Whether a call asks the store that answers a repeat cheaply before the claim."""
        return share >= self.threshold

    def after(self, share: float, *, repeat: bool) -> float:
        """The share once a call found its key known (`repeat`) or new."""
        return share + self.weight * (float(repeat) - share)
