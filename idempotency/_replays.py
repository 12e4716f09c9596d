"""Replays the sync face answers on the calling thread, from the Redis copy of the outcome.

A replay through the loop thread costs two thread hand-offs, about as much as its one Redis round
trip. A cached outcome is final (it is written only after the ledger has it), so reading it with
a blocking socket on the caller's own thread gives the answer the guard would give, with the same
`writesafe_calls_total` count. Anything else — no copy, another payload's (KEY_REUSED), Redis down,
a read-only tool, a twin not started yet, tracing on (the call's span is made by `Guard.run`) —
goes on to the guard on the loop thread, which decides it as for any call.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from writesafe.idempotency._metrics import answered
from writesafe.idempotency._spec import GuardedCall
from writesafe.idempotency._tool import Invocation
from writesafe.idempotency._tracing import tracing_on

if TYPE_CHECKING:
    from writesafe.idempotency._writesafe import WriteSafe


def cached_replay(twin: WriteSafe, call: GuardedCall) -> Invocation[Any] | None:
    """The replay of `call` from Redis, or None when the guard must answer it."""
    store = twin.keystore
    if store is None or call.tool.read_only or not twin.ready or tracing_on():
        return None
    started = time.perf_counter()
    cached = store.cached_now(call.scope, call.key)
    if cached is None or cached.fingerprint != call.fingerprint:
        return None
    value = call.tool.codec.decode(cached.result)
    calls, seconds = answered(call.tool.name, "replayed")
    calls.inc()
    seconds.observe(time.perf_counter() - started)
    return Invocation(value, True, call.key)
