"""The API key table (migration 0002): only hashes stored, revocation kept, schema as modelled."""

from __future__ import annotations

import hashlib

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from tests.conftest import MakeWriteSafe
from writesafe import WriteSafeError
from writesafe.ledger import ApiKeys, Base, Role, head_revision
from writesafe.ledger._migrations import VERSION_TABLE, in_ledger_schema
from writesafe.service import MAX_TOKEN_LENGTH, create_api_key, hash_token


async def test_only_the_hash_is_stored_and_revocation_is_kept(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    await ws.start()
    store = ApiKeys(ws.ledger.engine)
    record, token = await create_api_key(store, scope="acme", role=Role.OPERATOR, name="ops")
    assert token.startswith(f"wsk_{record.key_id}_")
    assert len(token) <= MAX_TOKEN_LENGTH
    assert record.secret_hash == hashlib.sha256(token.encode()).hexdigest() == hash_token(token)
    async with ws.ledger.engine.connect() as conn:
        await in_ledger_schema(conn)
        stored = (await conn.execute(text("SELECT * FROM writesafe_api_keys"))).mappings().all()
    assert all(token not in str(value) for row in stored for value in row.values())
    assert await store.active(hash_token(token)) == record
    assert await store.active(hash_token(token + "x")) is None

    other, _ = await create_api_key(store, scope="other", role=Role.READER, name="bot")
    assert [k.key_id for k in await store.list()] == [record.key_id, other.key_id]
    assert [k.key_id for k in await store.list(scope="other")] == [other.key_id]
    revoked = await store.revoke(record.key_id)
    assert revoked is not None
    assert revoked.revoked_at is not None
    assert await store.active(hash_token(token)) is None
    assert (await store.revoke(record.key_id)) == revoked  # revoking twice changes nothing
    assert await store.revoke("000000000000") is None
    assert [k.key_id for k in await store.list()] == [other.key_id]
    assert len(await store.list(include_revoked=True)) == 2


async def test_key_ids_and_hashes_are_unique(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    await ws.start()
    store = ApiKeys(ws.ledger.engine)
    record, _ = await create_api_key(store, scope="acme", role=Role.READER, name="a")
    with pytest.raises(IntegrityError):
        await store.add(
            key_id=record.key_id, secret_hash="0" * 64, scope="x", role=Role.READER, name="b"
        )
    with pytest.raises(IntegrityError):
        await store.add(
            key_id="ffffffffffff", secret_hash=record.secret_hash, scope="x", role=Role.READER,
            name="c",
        )  # fmt: skip


def _differences(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return list(compare_metadata(context, Base.metadata))


async def test_the_migrations_build_exactly_the_modelled_schema(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(auto_migrate=True)
    await ws.start()
    assert head_revision() == "0007"
    async with ws.ledger.engine.connect() as conn:
        await in_ledger_schema(conn)
        assert await conn.run_sync(_differences) == []


@pytest.mark.parametrize(
    ("scope", "name"), [("", "n"), (" padded", "n"), ("s", "x" * 256), ("s", "tab\there")]
)
async def test_a_key_needs_a_usable_scope_and_name(
    make_ws: MakeWriteSafe, scope: str, name: str
) -> None:
    ws = make_ws()
    await ws.start()
    store = ApiKeys(ws.ledger.engine)
    with pytest.raises(WriteSafeError) as raised:
        await create_api_key(store, scope=scope, role=Role.READER, name=name)
    assert raised.value.code == "INPUT_INVALID"
    assert await store.list(include_revoked=True) == []
