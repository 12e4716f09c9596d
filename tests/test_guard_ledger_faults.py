"""A ledger failure before any write runs must still reach the caller as an envelope.

Found by the chaos run (`pg_terminate_backend` during the inline lookup of an unknown outcome):
the guard's claim and outcome recording turn ledger errors into envelopes, but the ledger work in
between — the replay gate, a continuation's restart, a lease expiry — lets the raw SQLAlchemy
error escaped. The guard now answers OUTCOME_UNKNOWN (or TEMP_UNAVAILABLE for a failed operation).
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from tests.conftest import MakeWriteSafe
from writesafe import LookupOperation, NotFound, WriteSafeError
from writesafe.reconciler import LookupResult


async def test_a_ledger_error_in_the_replay_gate_is_an_outcome_unknown_envelope(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    calls: list[int] = []

    async def absent(op: LookupOperation) -> LookupResult:
        return NotFound()

    @ws.tool("submit", lookup=absent, settle_after=0)
    async def submit(n: int) -> int:
        calls.append(n)
        raise TimeoutError("sent, and the answer was lost")

    with pytest.raises(WriteSafeError) as first:
        await submit(1, idempotency_key="k")
    assert first.value.code == "OUTCOME_UNKNOWN"

    async def terminated(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("SELECT …", {}, Exception("terminating connection"))

    ws.ledger.attempts = terminated  # type: ignore[method-assign]
    with pytest.raises(WriteSafeError) as second:
        await submit(1, idempotency_key="k")
    assert second.value.code == "OUTCOME_UNKNOWN"
    assert second.value.envelope.side_effects == "unknown"
    assert calls == [1]
