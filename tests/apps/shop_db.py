"""A downstream shop in a real database (a SQLite file or the test's PostgreSQL schema), so that
effects and lookups are counted across processes."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

metadata = MetaData()
orders = Table(
    "shop_orders",
    metadata,
    Column("reference", String(255), primary_key=True),
    Column("order_id", Integer, nullable=False),
    Column("sku", String(64), nullable=False),
)
lookups = Table(
    "shop_lookups",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("reference", String(255), nullable=False),
)


class ShopDB:
    def __init__(self, url: str, schema: str | None = None, *, pooled: bool = False) -> None:
        connect_args: dict[str, Any] = {}
        if url.startswith("sqlite"):
            connect_args["timeout"] = 30
        elif schema:
            connect_args["server_settings"] = {"search_path": schema}
        # Unpooled where one instance serves several event loops (the test process); an app
        # process has one loop and keeps a small pool.
        pool: dict[str, Any] = {"pool_size": 4} if pooled else {"poolclass": NullPool}
        self.engine: AsyncEngine = create_async_engine(url, connect_args=connect_args, **pool)

    async def create(self) -> None:
        async with self.engine.begin() as conn:
            await conn.run_sync(metadata.create_all)

    async def place(self, reference: str, sku: str) -> dict[str, Any]:
        async with self.engine.begin() as conn:
            number = (await conn.execute(select(func.count()).select_from(orders))).scalar_one()
            row = {"reference": reference, "order_id": number + 1, "sku": sku}
            await conn.execute(insert(orders).values(**row))
        return {"order_id": row["order_id"], "sku": sku}

    async def find(self, reference: str) -> dict[str, Any] | None:
        """Log the lookup and return the order placed under `reference`, if any."""
        async with self.engine.begin() as conn:
            await conn.execute(insert(lookups).values(reference=reference))
            query = select(orders.c.order_id, orders.c.sku).where(orders.c.reference == reference)
            row = (await conn.execute(query)).mappings().first()
        return None if row is None else dict(row)

    async def seed(self, references: list[str], sku: str) -> None:
        rows = [{"reference": r, "order_id": n, "sku": sku} for n, r in enumerate(references, 1)]
        async with self.engine.begin() as conn:
            await conn.execute(insert(orders), rows)

    async def count_orders(self) -> int:
        async with self.engine.connect() as conn:
            return int((await conn.execute(select(func.count()).select_from(orders))).scalar_one())

    async def lookups_by_reference(self) -> dict[str, int]:
        query = select(lookups.c.reference, func.count()).group_by(lookups.c.reference)
        async with self.engine.connect() as conn:
            return {reference: count for reference, count in (await conn.execute(query)).all()}

    async def close(self) -> None:
        await self.engine.dispose()
