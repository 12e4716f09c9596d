"""Persistence of service API keys; only hashes are stored, and revoking keeps the audit row.

Making and hashing secrets is the service's job (`writesafe.service`); the ledger only stores
what it is given and finds an active key by its hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import cast

from sqlalchemy import Table, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from writesafe.ledger._clock import Clock, SystemClock
from writesafe.ledger._engine import reader
from writesafe.ledger._models import ApiKey
from writesafe.ledger._records import _Record

api_keys = cast(Table, ApiKey.__table__)


class Role(StrEnum):
    """What a key may do: `reader` reads its scope; `operator` also reconciles and resolves its
    scope; `admin` also acts deployment-wide (reconciles every scope, reads the metrics)."""

    READER = "reader"
    OPERATOR = "operator"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class ApiKeyRecord(_Record):
    """A stored key; `secret_hash` is the SHA-256 of the secret, never the secret itself."""

    id: int
    key_id: str
    secret_hash: str
    scope: str
    role: Role
    name: str
    created_at: datetime
    revoked_at: datetime | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", Role(self.role))


class ApiKeys:
    """The API key table of one ledger database."""

    def __init__(self, engine: AsyncEngine, clock: Clock | None = None) -> None:
        self.engine = engine
        self._reads = reader(engine)  # every request's key lookup: on SQLite, no write lock
        self.clock: Clock = clock or SystemClock()

    async def add(
        self, *, key_id: str, secret_hash: str, scope: str, role: Role, name: str
    ) -> ApiKeyRecord:
        values = {
            "key_id": key_id,
            "secret_hash": secret_hash,
            "scope": scope,
            "role": role.value,
            "name": name,
            "created_at": self.clock.now(),
        }
        async with self.engine.begin() as conn:
            row = (await conn.execute(insert(api_keys).values(**values).returning(api_keys))).one()
        return ApiKeyRecord.from_row(row._mapping)

    async def active(self, secret_hash: str) -> ApiKeyRecord | None:
        """The unrevoked key whose secret hashes to `secret_hash` (one indexed lookup)."""
        query = select(api_keys).where(
            api_keys.c.secret_hash == secret_hash, api_keys.c.revoked_at.is_(None)
        )
        async with self._reads.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        return None if row is None else ApiKeyRecord.from_row(row)

    async def list(
        self, *, scope: str | None = None, include_revoked: bool = False
    ) -> list[ApiKeyRecord]:
        query = select(api_keys).order_by(api_keys.c.id)
        if scope is not None:
            query = query.where(api_keys.c.scope == scope)
        if not include_revoked:
            query = query.where(api_keys.c.revoked_at.is_(None))
        async with self._reads.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [ApiKeyRecord.from_row(row) for row in rows]

    async def revoke(self, key_id: str) -> ApiKeyRecord | None:
        """Revoke the key (idempotently); None when no key has that id."""
        statement = (
            update(api_keys)
            .where(api_keys.c.key_id == key_id, api_keys.c.revoked_at.is_(None))
            .values(revoked_at=self.clock.now())
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)
            row = (
                (await conn.execute(select(api_keys).where(api_keys.c.key_id == key_id)))
                .mappings()
                .first()
            )
        return None if row is None else ApiKeyRecord.from_row(row)
