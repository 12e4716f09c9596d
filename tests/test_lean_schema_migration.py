"""Migration 0003 upgrades a populated ledger in place: every row kept, the lean indexes in use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, inspect, select

from tests.conftest import PG_URL
from writesafe.ledger import Intent, Ledger, Outcome, Status
from writesafe.ledger._migrations import in_ledger_schema, upgrade
from writesafe.ledger._writer import attempts, operations

LEAN = {
    "ix_writesafe_operations_scope_updated",
    "ix_writesafe_operations_leases",
    "ix_writesafe_operations_unknown",
    "ix_writesafe_operations_attention",
}
BROAD = {
    "ix_writesafe_operations_status_updated",
    "ix_writesafe_operations_tool_status",
    "ix_writesafe_operations_status_lease",
    "ix_writesafe_operations_status_next_check",
    "ix_writesafe_operations_scope_status_updated",
}


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "sqlite":
        return {"url": f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"}
    return {"url": PG_URL, "schema": request.getfixturevalue("pg_schema")}


async def _populate(ledger: Ledger) -> None:
    """Operations in every state, with their attempts, written at revision 0002."""
    for n, status in enumerate(Status):
        for copy in range(3):
            intent = Intent(
                scope=f"tenant-{copy}",
                key=f"{status.value}-{copy}",
                tool="submit",
                fingerprint=f"{n:064d}",
                arguments=f'{{"n": {n}}}',
                owner=f"owner-{n}-{copy}",
                lease_seconds=15.0,
                max_executions=3,
            )
            row = (await ledger.claim(intent)).operation
            if status is Status.IN_FLIGHT:
                continue
            ends = Status.OUTCOME_UNKNOWN if status is Status.NEEDS_ATTENTION else status
            done = await ledger.finish(row, intent.owner, Outcome(ends, result=f'"{n}"'))
            assert done is not None
            if status is Status.NEEDS_ATTENTION:
                assert await ledger.transition(done, Status.NEEDS_ATTENTION) is not None


async def _rows(ledger: Ledger) -> tuple[list[Any], list[Any]]:
    async with ledger.engine.connect() as conn:
        ops = (await conn.execute(select(operations).order_by(operations.c.id))).all()
        atts = (await conn.execute(select(attempts).order_by(attempts.c.id))).all()
    return list(ops), list(atts)


def _index_names(connection: Connection) -> set[str]:
    return {str(index["name"]) for index in inspect(connection).get_indexes(operations.name)}


async def test_0003_upgrades_a_populated_ledger_in_place(ledger_url: dict[str, Any]) -> None:
    ledger = Ledger.from_url(ledger_url["url"], schema=ledger_url.get("schema"))
    try:
        await upgrade(ledger.engine, "0002")
        await _populate(ledger)
        before = await _rows(ledger)
        async with ledger.engine.connect() as conn:
            await in_ledger_schema(conn)
            assert await conn.run_sync(_index_names) >= BROAD

        await ledger.migrate()

        assert await _rows(ledger) == before
        async with ledger.engine.connect() as conn:
            await in_ledger_schema(conn)
            names = await conn.run_sync(_index_names)
        assert names & BROAD == set()
        assert names >= LEAN
        attention = await ledger.list(statuses=[Status.NEEDS_ATTENTION], scope="tenant-1")
        assert [row.key for row in attention] == ["needs_attention-1"]
        counts = await ledger.count_by_status([Status.IN_FLIGHT, Status.NEEDS_ATTENTION])
        assert counts == {Status.IN_FLIGHT: 3, Status.NEEDS_ATTENTION: 3}
    finally:
        await ledger.close()
