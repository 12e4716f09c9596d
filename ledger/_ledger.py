"""The ledger: the source of truth, composed of its jobs.

`HotPath` is the guard's writes, `Reads` the service's and the status's, `Reconciliation` the
reconciler's claims and settlements, `LedgerTime` the one clock they judge time by. `Ledger`
holds what they share (the engine, the writer, the clock) and the ledger's own life: its
backend (`_backend`), its schema, its connections.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from writesafe.ledger._api_keys import ApiKeys
from writesafe.ledger._backend import open_backend
from writesafe.ledger._clock import Clock, SystemClock
from writesafe.ledger._engine import ConnectionBudget, reader
from writesafe.ledger._hot_path import HotPath
from writesafe.ledger._lease_judges import judge_leases
from writesafe.ledger._migrations import current_revision, downgrade, ensure_current, upgrade
from writesafe.ledger._reads import Reads
from writesafe.ledger._reconciliation import Reconciliation
from writesafe.ledger._writer import Writer

DEFAULT_LEASE_SECONDS = 15.0


class Ledger(HotPath, Reads, Reconciliation):
    """The source of truth for operations; thin, async, and safe to share across tasks."""

    def __init__(
        self,
        engine: AsyncEngine,
        writer: Writer,
        clock: Clock | None = None,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.engine = engine
        # Transactions that only read: on SQLite they take no lock the writers need.
        self._reads = reader(engine)
        # The guard's hot writes; reconciliation's go through `engine`, reads through `_reads`.
        self.writer = writer
        self.clock: Clock = clock or SystemClock()
        # True: time is the server's `now()`. SQLite has no server clock; a given clock wins.
        self.server_clock = clock is None and writer.shared_clock
        # On the store's clock, or (none the processes share) by watching them.
        self._leases = judge_leases(writer.shared_clock, self.clock, lease_seconds)

    @classmethod
    def from_url(
        cls,
        url: str | URL,
        *,
        schema: str | None = None,
        clock: Clock | None = None,
        connect_timeout: float = 5.0,
        budget: ConnectionBudget | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> Ledger:
        """The ledger at `url`; on PostgreSQL its engine and its writer share `budget`."""
        budget = budget or ConnectionBudget()
        engine, writer = open_backend(
            url, schema=schema, connect_timeout=connect_timeout, budget=budget
        )
        return cls(engine, writer, clock, lease_seconds=lease_seconds)

    @property
    def file(self) -> Path | None:
        """The SQLite ledger's file, absolute (beside it: its restore mark, the reconciler's
        lock, the WAL); None for a server's."""
        return self.writer.file

    @property
    def reads_locally(self) -> bool:
        """A key's row can be read without a round trip, off the event loop (`peek`)."""
        return self.writer.in_process

    @property
    def shown_url(self) -> str:
        """The ledger's URL with its password hidden: for messages."""
        return self.engine.url.render_as_string(hide_password=True)

    def api_keys(self) -> ApiKeys:
        """The service's API keys, kept in this ledger and timed on its clock."""
        return ApiKeys(self.engine, self.clock)

    async def migrate(self) -> None:
        """Bring the schema to the newest migration (creating a PostgreSQL schema not there)."""
        await upgrade(self.engine)

    async def downgrade(self, revision: str) -> None:
        """Undo migrations down to `revision` (`base`: all of them)."""
        await downgrade(self.engine, revision)

    async def revision(self) -> str | None:
        """The schema's migration revision; None before the first."""
        return await current_revision(self.engine)

    async def check_schema(self) -> None:
        """Raise `LedgerNotMigrated` unless the schema is current."""
        await ensure_current(self.engine)

    async def close(self) -> None:
        await self.writer.close()
        await self.engine.dispose()

    def serve_blocking_callers(self, alone: Callable[[], bool]) -> None:
        """This ledger's event loop serves callers that block on it anyway (the sync face's loop
        thread), `alone()` while it serves one: the embedded writer may then write on the loop's
        thread (`ledger._sqlite_writer`). PostgreSQL's writes are a round trip on the loop
        already."""
        self.writer.serve_blocking_callers(alone)

    def serve_async_callers(self, alone: Callable[[], bool]) -> None:
        """This ledger's guard runs `alone()` one guarded call on its event loop: the embedded
        writer may then commit that call's intent on the loop's thread while its fsyncs are
        brief, saving the hops to its own thread and back (`ledger._sqlite_writer`)."""
        self.writer.serve_async_callers(alone)

    async def forget_loop(self) -> None:
        """Drop the connections opened on an event loop this process has left, and open new ones
        on the running loop as needed: asyncio connections, and the pool's queue, belong to the
        loop they were made on. PostgreSQL's are dropped unclosed (closing needs their loop; the
        server ends each session when its socket is collected); SQLite's close from any loop.
        """
        self.writer.forget_loop()
        await self.engine.dispose(close=self.writer.in_process)
