"""Prometheus metrics of the guard (exposed by the service's /metrics).

prometheus-client comes with the `service` extra; without it the metrics count nothing
(`_uncounted`), since nothing in the core reads them.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram
else:
    try:
        from prometheus_client import Counter, Histogram
    except ModuleNotFoundError:
        from writesafe.idempotency._uncounted import Counter, Histogram

CALLS = Counter(
    "writesafe_calls_total",
    "Guarded calls by how they were answered.",
    ["tool", "answer"],
)
EXECUTIONS = Counter(
    "writesafe_executions_total",
    "Executions of wrapped writes, by the status they ended in.",
    ["tool", "status"],
)
STORE_DEGRADED = Counter(
    "writesafe_store_degraded_total",
    "Store operations that failed and were degraded around (Redis → ledger-only).",
    ["store", "operation"],
)
RETRIES = Counter(
    "writesafe_retries_total",
    "Automatic retries inside a call (failures that proved no effect).",
    ["tool"],
)
RETRIES_THROTTLED = Counter(
    "writesafe_retries_throttled_total",
    "Retries refused by the dependency's retry budget (token bucket empty).",
    ["tool"],
)
LEASES_LOST = Counter(
    "writesafe_leases_lost_total",
    "Executions whose lease was taken over before they finished (their outcome was fenced off).",
    ["tool"],
)
CALL_SECONDS = Histogram(
    "writesafe_call_seconds",
    "Latency of guarded calls by answer.",
    ["tool", "answer"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)


@cache
def executed(tool: str, status: str) -> Counter:
    """The `EXECUTIONS` child of one (tool, status), looked up once (see `answered`)."""
    return EXECUTIONS.labels(tool, status)


@cache
def answered(tool: str, answer: str) -> tuple[Counter, Histogram]:
    """The `CALLS` and `CALL_SECONDS` children of one (tool, answer), looked up once: `labels()`
    takes a lock and validates its arguments, on every guarded call otherwise."""
    return CALLS.labels(tool, answer), CALL_SECONDS.labels(tool, answer)
