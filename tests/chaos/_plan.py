"""The seeded fault plan: what the shop does with each request, decided only by (seed, ref, n).

A request's fault depends on the seed, the order's client reference and how many requests for that
reference the shop has seen before, so a failing run replays with the same seed; so do which orders
a second process submits too, and which orders stop their own process just before they send (and
where).
Process-level faults (kills, restarts, stalls) and each process's clock skew come from the
harness's own seeded generator; their timing against the requests is not reproducible, their kinds
and order are.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from enum import StrEnum


class Fault(StrEnum):
    """What the shop does with one order request."""

    OK = "ok"
    INPUT_INVALID = "input_invalid"  # 422 before writing
    AUTH_REQUIRED = "auth_required"  # 401 before writing
    DEPENDENCY_BUSY = "dependency_busy"  # 503 with Retry-After before writing
    COMMIT_THEN_HANG = "commit_then_hang"  # writes, then answers after the client gave up
    COMMIT_THEN_DROP = "commit_then_drop"  # writes, then breaks the connection mid-response
    HANG_NO_COMMIT = "hang_no_commit"  # never writes, answers after the client gave up
    COMMIT_LATE = "commit_late"  # writes after the client gave up, within the settle window


class DriverFault(StrEnum):
    """What the fault driver does to the processes and servers around the shop."""

    KILL_WORKER = "kill_worker"  # SIGKILL a client worker mid-write (it is restarted)
    RESTART_REDIS = "restart_redis"  # kill the run's own redis-server (data lost) and restart it
    TERMINATE_PG = "terminate_pg"  # pg_terminate_backend on the run's own connections
    STALL_SHOP = "stall_shop"  # SIGSTOP the shop, SIGCONT it shortly after
    STALL_WORKER = "stall_worker"  # SIGSTOP a client worker, SIGCONT it after more than the lease


class StallPoint(StrEnum):
    """Where an execution that stalls before its send stops its own process."""

    BEFORE_FENCE = "before_fence"  # in the tool, before its request: the fence's to refuse
    AFTER_FENCE = "after_fence"  # after the fence admitted the request: the check at its write's
    AT_WRITE = "at_write"  # after that check, as the write starts: only the downstream can refuse


class Downstream(StrEnum):
    """What the shop does with the key and fencing token a fenced client forwards."""

    FENCED = "fenced"  # refuses a request whose token is lower than one it has already seen
    PLAIN = "plain"  # ignores both: neither deduplicates nor checks tokens


@dataclass(frozen=True)
class Timings:
    """Seconds. The settle window is what makes `not found` conclusive: it must cover the latest
    commit the plan can produce (a late commit, or a request held up by a stall), with margin
    for a loaded machine."""

    client_timeout: float = 0.5
    hang: float = 1.5
    late_commit: float = 1.0
    max_stall: float = 0.8
    settle_after: float = 4.0
    lease_seconds: float = 2.0
    retry_after_seconds: int = 1
    # A stopped writer is continued after this long: always past its lease, and often past the
    # lease plus the settle window too, when a duplicate may already have been let through.
    writer_stall_min: float = 3.0
    writer_stall_max: float = 8.0

    def __post_init__(self) -> None:
        if self.writer_stall_min <= self.lease_seconds:
            raise ValueError("a writer stall must outlast the lease, or it is no fault")


DEFAULT_WEIGHTS: dict[Fault, float] = {
    Fault.OK: 0.70,
    Fault.INPUT_INVALID: 0.04,
    Fault.AUTH_REQUIRED: 0.04,
    Fault.DEPENDENCY_BUSY: 0.04,
    Fault.COMMIT_THEN_HANG: 0.05,
    Fault.COMMIT_THEN_DROP: 0.05,
    Fault.HANG_NO_COMMIT: 0.04,
    Fault.COMMIT_LATE: 0.04,
}


@dataclass(frozen=True)
class Plan:
    """Seed, fault weights and timings; `lookup_broken_rate` of orders have a lookup that never
    answers, the only case where the truth is undecidable and escalation is the right end.

    `duplicate_rate` of orders are submitted by a second worker process too (a duplicate from
    another process); `stall_rate` of orders stop their own process just before they send (the
    harness continues it after a writer stall), `after_fence_share` of those after the fence
    admitted the send (half of them before the check at the write, half after it);
    `skew_seconds` is the largest clock offset of a client worker or reconciler process (0:
    every process keeps the machine's clock).
    """

    seed: int
    weights: dict[Fault, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    lookup_broken_rate: float = 0.01
    duplicate_rate: float = 0.1
    stall_rate: float = 0.01
    after_fence_share: float = 0.5
    skew_seconds: float = 30.0
    downstream: Downstream = Downstream.FENCED
    driver_faults: tuple[DriverFault, ...] = tuple(DriverFault)
    timings: Timings = field(default_factory=Timings)

    def fault(self, ref: str, n: int) -> Fault:
        rng = random.Random(f"{self.seed}/{ref}/{n}")
        kinds = list(self.weights)
        return rng.choices(kinds, weights=[self.weights[k] for k in kinds])[0]

    def lookup_broken(self, ref: str) -> bool:
        return random.Random(f"{self.seed}/{ref}/lookup").random() < self.lookup_broken_rate

    def duplicated(self, ref: str) -> bool:
        return random.Random(f"{self.seed}/{ref}/twin").random() < self.duplicate_rate

    def stall_point(self, ref: str) -> StallPoint | None:
        """Where the order stops its process, if it does: an order, not an execution, because
        an execution may never get there (another stall in its process closed its fence, the
        ledger was out of reach, its process was killed), and the point must still be tried."""
        rng = random.Random(f"{self.seed}/{ref}/stall")
        if rng.random() >= self.stall_rate:
            return None
        if rng.random() >= self.after_fence_share:
            return StallPoint.BEFORE_FENCE
        return StallPoint.AFTER_FENCE if rng.random() < 0.5 else StallPoint.AT_WRITE

    def describe(self) -> str:
        weights = ", ".join(f"{k.value}={v:.2f}" for k, v in self.weights.items())
        return (
            f"seed={self.seed} weights: {weights}; lookup broken for "
            f"{self.lookup_broken_rate:.0%} of orders; duplicated by a second process "
            f"{self.duplicate_rate:.0%}; orders stalling before the send "
            f"{self.stall_rate:.1%} ({self.after_fence_share:.0%} of them after the fence); "
            f"clock skew up to ±{self.skew_seconds:g} s; downstream {self.downstream.value}; "
            f"driver faults {', '.join(f.value for f in self.driver_faults) or 'none'}; "
            f"timings: {self.timings}"
        )


def order_refs(seed: int, orders: int) -> list[str]:
    """The client references (and idempotency keys) of the run's logical orders."""
    return [f"ord-{seed}-{n}" for n in range(orders)]


def plan_to_json(plan: Plan) -> str:
    return json.dumps(
        {
            "seed": plan.seed,
            "weights": {k.value: v for k, v in plan.weights.items()},
            "lookup_broken_rate": plan.lookup_broken_rate,
            "duplicate_rate": plan.duplicate_rate,
            "stall_rate": plan.stall_rate,
            "after_fence_share": plan.after_fence_share,
            "skew_seconds": plan.skew_seconds,
            "downstream": plan.downstream.value,
            "driver_faults": [f.value for f in plan.driver_faults],
            "timings": asdict(plan.timings),
        }
    )


def plan_from_json(text: str) -> Plan:
    data = json.loads(text)
    return Plan(
        seed=data["seed"],
        weights={Fault(k): v for k, v in data["weights"].items()},
        lookup_broken_rate=data["lookup_broken_rate"],
        duplicate_rate=data["duplicate_rate"],
        stall_rate=data["stall_rate"],
        after_fence_share=data["after_fence_share"],
        skew_seconds=data["skew_seconds"],
        downstream=Downstream(data["downstream"]),
        driver_faults=tuple(DriverFault(f) for f in data["driver_faults"]),
        timings=Timings(**data["timings"]),
    )
