"""What a request costs, and each tenant's bound on work in flight.

Counting requests lets one tenant buy heavy work at the price of light: a 500-row listing costs
the database, the serializer and the event loop about as much as eleven status reads, and a burst
of them stalled every other tenant's answers. So a request costs 1, plus 1 per 50 rows it asks
for, and that cost is what the key's rate limit spends (`_rate_limits`) and what a tenant's work
in flight adds up to here. A tenant (a scope: all its keys together) has at most
`tenant_work_units` in flight; a request past that is refused at once with RATE_LIMITED and a
one-second `Retry-After`, rather than queued, so a tenant's backlog never holds connections or
slots the others need. A request that costs more than the whole bound on its own is admitted
when its tenant has nothing else in flight.

The refusal comes before the key's lookup when it can: each key that held a slot is remembered
with its tenant (by the key's hash, so only its holder can be refused early), and a request with
that key while its tenant's bound is full is refused before it takes a database connection. A
tenant whose clients ask again at once (ignoring `Retry-After`) otherwise spent a lookup on each
refusal, on the connections and the core the other tenants need.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from fastapi import Request

from writesafe.idempotency import WriteSafeError
from writesafe.reconciler import CODES, Code

ROWS_PER_UNIT = 50
MAX_ROWS = 500  # a listing's largest page (`_models.MAX_PAGE`); a larger ask is refused later
KNOWN_KEYS = 4096  # keys remembered with their tenant for the early refusal, oldest forgotten


def request_cost(request: Request) -> int:
    """1, plus 1 per `ROWS_PER_UNIT` rows the request's `limit` asks for (a 500-row page: 11).

    Read before validation, so a `limit` that does not parse costs 1 (it is refused with 422)."""
    raw = request.query_params.get("limit", "")
    rows = int(raw) if raw.isdigit() and len(raw) <= 6 else 0
    return 1 + min(rows, MAX_ROWS) // ROWS_PER_UNIT


class TenantWork:
    """The units of work each tenant scope has in flight in this process, bounded by `units`."""

    def __init__(self, units: int, enabled: bool = True) -> None:
        self._units = units
        self._enabled = enabled
        self._in_flight: dict[str, int] = {}
        self._scope_of: dict[str, str] = {}  # a key's hash → its scope, oldest first

    def refuse_early(self, credential: str, cost: int) -> None:
        """RATE_LIMITED if `credential` (a key's hash) held a slot before and its tenant's bound
        has no room for `cost` now: what `slot` would answer after the lookup, before it."""
        scope = self._scope_of.get(credential)
        if scope is not None:
            self._check(scope, cost)

    @contextlib.contextmanager
    def slot(self, scope: str, cost: int, credential: str | None = None) -> Iterator[None]:
        """Hold `cost` units of `scope`'s bound while the block runs; RATE_LIMITED if it is full.
        `credential`, the hash of the key that asks, is remembered for `refuse_early`."""
        self._check(scope, cost)
        if credential is not None:
            self._remember(credential, scope)
        self._in_flight[scope] = self._in_flight.get(scope, 0) + cost
        try:
            yield
        finally:
            left = self._in_flight[scope] - cost
            if left:
                self._in_flight[scope] = left
            else:
                del self._in_flight[scope]

    def _check(self, scope: str, cost: int) -> None:
        busy = self._in_flight.get(scope, 0)
        if self._enabled and busy and busy + cost > self._units:
            message = f"more than {self._units} units of work in flight for this tenant"
            raise WriteSafeError(CODES.envelope(Code.RATE_LIMITED, message, retry_after_ms=1000))

    def _remember(self, credential: str, scope: str) -> None:
        if credential in self._scope_of:
            return
        if len(self._scope_of) >= KNOWN_KEYS:
            del self._scope_of[next(iter(self._scope_of))]
        self._scope_of[credential] = scope
