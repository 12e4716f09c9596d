"""The hot writes answer with the row as stored, though their statements return only its new times.

A claim returns the new id and the times the store wrote, a change its times: the writer builds
the rest of the row from the values it sent. What it answers with must be the stored row, on
the server's clock too, after renewals that moved the lease without a new version.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import asyncpg
import pytest
from sqlalchemy import text

from tests.conftest import MakeWriteSafe, asyncpg_dsn
from tests.round_trips import count_round_trips
from writesafe.ledger import Claim, Intent, Ledger, OperationRecord, Outcome, Status
from writesafe.ledger._migrations import in_ledger_schema
from writesafe.ledger._writer import Change, operations

KEY = "ord-1"


def _intent(owner: str, key: str = KEY) -> Intent:
    return Intent("default", key, "submit", "f" * 64, '{"sku":"A1"}', owner, 15.0, 3, "a" * 64)


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


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_claim_of_a_held_key_answers_with_its_row_in_one_statement(
    make_ws: MakeWriteSafe, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_ws()
    await ws.start()
    ledger = ws.ledger
    first = await ledger.claim(_intent("first"))
    sent = count_round_trips(ledger.engine, monkeypatch)

    again = await ledger.claim(_intent("second"))

    assert sent == ["ledger"]
    assert not again.created
    assert again.operation == first.operation == await ledger.get("default", KEY)
    assert [attempt.owner for attempt in await ledger.attempts(first.operation.id)] == ["first"]


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_key_committed_after_the_claims_snapshot_is_read_apart(
    make_ws: MakeWriteSafe, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """READ COMMITTED: the claim's insert waits for a concurrent insert of its key and then
    conflicts with it, but the row was committed after the statement's snapshot, so the
    statement's own read cannot see it. The claim reads it with a second statement, and answers
    with the other claimer's row, opening no attempt of its own."""
    ws = make_ws()
    await ws.start()
    sent = count_round_trips(ws.ledger.engine, monkeypatch)

    claim, rival_id = await _claim_behind_a_rival(ws.ledger, pg_schema, sent)

    assert sent == ["ledger", "ledger"], "the claim, then the read of the row it conflicted with"
    assert not claim.created
    assert claim.operation.id == rival_id
    assert claim.operation == await ws.ledger.get("default", KEY)
    assert await ws.ledger.attempts(rival_id) == []


@pytest.mark.parametrize("backend", ["postgres"])  # SQLite reads the row in the claim's transaction
async def test_a_row_pruned_between_a_claims_conflict_and_its_read_is_claimed_anew(
    make_ws: MakeWriteSafe, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/operations.md tells operators to delete old final rows; one may go while a claim that
    # conflicted with it, unable to see it, reads it apart (the case above).
    ws = make_ws()
    await ws.start()
    fetch = ws.ledger.writer.fetch

    async def fetch_after_pruning(scope: str, key: str) -> OperationRecord | None:
        async with ws.ledger.engine.begin() as connection:
            await in_ledger_schema(connection)
            await connection.execute(
                text("DELETE FROM writesafe_operations WHERE key = :k"), {"k": key}
            )
        return await fetch(scope, key)

    monkeypatch.setattr(ws.ledger.writer, "fetch", fetch_after_pruning)
    claim, rival_id = await _claim_behind_a_rival(ws.ledger, pg_schema, [])

    assert claim.created, "a pruned key is a new operation"
    assert claim.operation.id != rival_id
    assert [attempt.owner for attempt in await ws.ledger.attempts(claim.operation.id)] == ["late"]


async def _claim_behind_a_rival(ledger: Ledger, schema: str, sent: list[str]) -> tuple[Claim, int]:
    """Claim `KEY` while another connection's insert of it is uncommitted, and commit that once
    the claim waits for it; the claim, and the rival row's id. `sent` is cleared as the claim
    starts (the rival's template row is a claim of its own)."""
    template = await ledger.claim(_intent("other", "template"))
    table = f'"{schema}".writesafe_operations'
    copied = [column.name for column in operations.columns if column.name != "id"]
    chosen = ", ".join("$1" if name == "key" else name for name in copied)
    other = await asyncpg.connect(asyncpg_dsn())
    try:
        rival = other.transaction()
        await rival.start()
        rival_id: int = await other.fetchval(
            f"INSERT INTO {table} ({', '.join(copied)}) SELECT {chosen} FROM {table}"
            " WHERE id = $2 RETURNING id",
            KEY,
            template.operation.id,
        )
        sent.clear()
        claiming = asyncio.create_task(ledger.claim(_intent("late")))
        await _waiting_for_a_lock(other, schema)
        await rival.commit()
        return await claiming, rival_id
    finally:
        await other.close()


@pytest.mark.parametrize("backend", ["postgres"])
async def test_first_claims_of_one_key_at_once_make_one_operation(
    make_ws: MakeWriteSafe,
) -> None:
    """Two workers claim each of twenty keys at the same moment: one claim per key creates the
    operation and its one execution attempt; the other answers with that row."""
    workers = [make_ws(), make_ws()]
    for ws in workers:
        await ws.start()
    ledgers = [ws.ledger for ws in workers]
    for n in range(20):
        claims = await asyncio.gather(
            ledgers[0].claim(_intent("a", f"k-{n}")), ledgers[1].claim(_intent("b", f"k-{n}"))
        )
        assert sorted(claim.created for claim in claims) == [False, True]
        winner = next(claim.operation for claim in claims if claim.created)
        assert all(claim.operation == winner for claim in claims)
        attempts = await ledgers[0].attempts(winner.id)
        assert [(a.execution, a.owner) for a in attempts] == [(1, winner.lease_owner)]


async def _waiting_for_a_lock(connection: asyncpg.Connection, schema: str) -> None:
    """Return once a statement naming `schema` waits for a lock (the claim, on the rival's
    uncommitted row)."""
    for _ in range(500):
        waiting = await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND position($1 in query) > 0",
            schema,
        )
        if waiting:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the claim never waited for the rival's row")
