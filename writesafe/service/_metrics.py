"""Prometheus metrics of the service itself; the guard's own live in `idempotency._metrics`."""

from __future__ import annotations

import time

from prometheus_client import Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from writesafe.idempotency import ReconcileReport, WriteSafe
from writesafe.ledger import Status

REQUESTS = Counter(
    "writesafe_http_requests_total",
    "Service requests by method, route template and status.",
    ["method", "route", "status"],
)
REQUEST_SECONDS = Histogram(
    "writesafe_http_request_seconds",
    "Service request latency by method and route template.",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
PENDING = Gauge(
    "writesafe_operations_pending",
    "Operations not yet final, by status, over all scopes (read from the ledger at each scrape).",
    ["status"],
)

RECONCILED = Counter(
    "writesafe_reconciled_total",
    "Operations handled by reconciliation passes run through the service, by verdict "
    "(found, absent, still_unknown, escalated, superseded, errors, expired_leases).",
    ["verdict"],
)
RECONCILE_SECONDS = Histogram(
    "writesafe_reconcile_pass_seconds",
    "Duration of reconciliation passes run through the service.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
RESOLUTIONS = Counter(
    "writesafe_resolutions_total",
    "Operator resolutions through the service, by outcome.",
    ["outcome"],
)

_VERDICTS = (
    "found",
    "absent",
    "still_unknown",
    "escalated",
    "superseded",
    "errors",
    "expired_leases",
)
_PENDING_STATUSES = (Status.IN_FLIGHT, Status.OUTCOME_UNKNOWN, Status.NEEDS_ATTENTION)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


async def refresh_pending(ws: WriteSafe) -> None:
    """Set the pending gauge from the ledger (only non-final statuses: an index range each)."""
    for status, count in (await ws.ledger.count_by_status(_PENDING_STATUSES)).items():
        PENDING.labels(status.value).set(count)


def record_pass(report: ReconcileReport) -> None:
    for verdict in _VERDICTS:
        RECONCILED.labels(verdict).inc(getattr(report, verdict))
    RECONCILE_SECONDS.observe(report.seconds)


class RequestMetrics:
    """Counts and times every request by its route template (bounded label values)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            method = scope["method"] if scope["method"] in _METHODS else "OTHER"
            route = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(method, route, str(status)).inc()
            REQUEST_SECONDS.labels(method, route).observe(time.perf_counter() - started)
