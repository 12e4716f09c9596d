"""The hot writes answer with the row as stored, though their statements return only its new times.

A claim returns the new id and the times the store wrote, a change its times: the writer builds
the rest of the row from the values it sent. What it answers with must be the stored row, on
the server's clock too, after renewals that moved the lease without a new version.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.conftest import MakeWriteSafe
from writesafe.ledger import Intent, Ledger, OperationRecord, Outcome, Status
from writesafe.ledger._writer import Change

KEY = "ord-1"


def _intent(owner: str) -> Intent:
    return Intent("default", KEY, "submit", "f" * 64, '{"sku":"A1"}', owner, 15.0, 3, "a" * 64)


async def _as_stored(ledger: Ledger, returned: OperationRecord | None) -> OperationRecord:
    assert returned is not None
    stored = await ledger.get("default", KEY)
    assert returned == stored
    return returned


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_each_hot_write_answers_with_the_row_as_stored(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    await ws.start()
    ledger = ws.ledger
    claim = await ledger.claim(_intent("first"))
    assert claim.created
    claimed = await _as_stored(ledger, claim.operation)
    assert isinstance(claimed.lease_expires_at, datetime)
    assert await ledger.renew_leases({claimed.id: "first"}, 60.0) == {claimed.id}
    busy = Outcome(Status.FAILED, error='{"code":"DEPENDENCY_BUSY"}', code="DEPENDENCY_BUSY")
    failed = await _as_stored(ledger, await ledger.finish(claimed, "first", busy))
    assert failed.lease_expires_at is None
    restarted = await _as_stored(ledger, await ledger.restart(failed, _intent("second")))
    assert restarted.executions == 2
    assert restarted.lease_expires_at is not None
    assert restarted.lease_expires_at > restarted.updated_at
    assert await ledger.renew_leases({restarted.id: "second"}, 60.0) == {restarted.id}
    unknown = Outcome(Status.OUTCOME_UNKNOWN, error='{"code":"OUTCOME_UNKNOWN"}')
    assert await ledger.finish(restarted, "stranger", unknown) is None, "fenced by the owner"
    ended = await _as_stored(ledger, await ledger.finish(restarted, "second", unknown))
    assert ended.next_check_at == ended.updated_at
    outcomes = [attempt.outcome for attempt in await ledger.attempts(ended.id)]
    assert outcomes == [Status.FAILED.value, Status.OUTCOME_UNKNOWN.value]


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_change_that_leaves_the_lease_alone_is_refused(make_ws: MakeWriteSafe) -> None:
    """A renewal moves the lease without a new version: a change that does not set it could
    not tell what the row holds."""
    ws = make_ws()
    await ws.start()
    claim = await ws.ledger.claim(_intent("first"))
    with pytest.raises(ValueError, match="lease"):
        Change(claim.operation, {"status": Status.FAILED.value}, claim.operation.updated_at)
