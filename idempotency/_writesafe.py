"""`WriteSafe`: one ledger, optionally one Redis, and the tools guarded by them."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, cast, overload

from writesafe.idempotency._arguments import KEY_PARAMETER
from writesafe.idempotency._context import OperationContext, current_operation
from writesafe.idempotency._errors import invalid_input
from writesafe.idempotency._guard import Guard, GuardSettings
from writesafe.idempotency._keys import DEFAULT_SCOPE, refuse_hidden_characters, validate_key
from writesafe.idempotency._recording import LEDGER_ERRORS
from writesafe.idempotency._results import ResultCodec, ResultNotStored
from writesafe.idempotency._settings import SettingsRefused, WriteSafeSettings, overridden
from writesafe.idempotency._spec import DEFAULT_LOOKUP_TIMEOUT, ToolSpec
from writesafe.idempotency._sync import SyncTool, SyncWriteSafe, async_face, threaded_lookup
from writesafe.idempotency._tool import Tool
from writesafe.idempotency._tracing import traced_reconcile
from writesafe.ledger import (
    Clock,
    Ledger,
    LedgerNotMigrated,
    canonical_json,
    expired_at,
    loads_json,
)
from writesafe.ledger._engine import ConnectionBudget
from writesafe.reconciler import (
    CODES,
    DEFAULT_ADAPTER,
    DEFAULT_RETRY_POLICY,
    Adapter,
    CodeRegistry,
    EvidenceRequired,
    Lookup,
    LookupOperation,
    LookupResult,
    OperationStatus,
    ReconcileReport,
    Redaction,
    Redactor,
    RetryPolicy,
)
from writesafe.reconciler._check import LookupSpec
from writesafe.reconciler._misfit import ResultMisfit
from writesafe.reconciler._reconcile import ReconcilePolicy, Reconciler
from writesafe.reconciler._resolve import Resolution, resolve_operation
from writesafe.reconciler._retention_bound import retention_refusal
from writesafe.reconciler._retry import RetryBudget
from writesafe.reconciler._store_order import StoreOrder

if TYPE_CHECKING:
    from writesafe.idempotency._keystore import RedisKeyStore

MAX_REASON_LENGTH = 4_096

R = TypeVar("R")
P = ParamSpec("P")  # a registered function's parameters, which its tool keeps


class ToolDecorator(Protocol):
    """What `WriteSafe.tool(...)` returns: an `async def` becomes a `Tool`, a plain `def` a
    `SyncTool` (blocking, same guarantees: see `writesafe.idempotency._sync`)."""

    # An async def matches both; the first, narrower one wins (as typeshed's overloads do).
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, function: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Tool[R, P]: ...
    @overload
    def __call__(self, function: Callable[P, R], /) -> SyncTool[R, P]: ...


def _key_store(settings: WriteSafeSettings) -> RedisKeyStore:
    """The Redis key store of `settings`; redis-py (half a second to import) loads only here, so
    a deployment without Redis never loads it."""
    from writesafe.idempotency._keystore import RedisKeyStore

    assert settings.redis_url is not None
    return RedisKeyStore(
        settings.redis_url,
        prefix=settings.redis_prefix,
        # The cache never outlives the ledger row it answers for (docs/operations.md).
        outcome_ttl=min(settings.outcome_ttl, settings.retention),
        max_result_bytes=settings.redis_max_result_bytes,
    )


class WriteSafe:
    """Guards writes so each runs at most once per `(scope, key)`.

    `WriteSafe()` is the embedded default: a SQLite file beside the process, no Redis, schema
    created on first use. Give `database_url` (PostgreSQL, asyncpg) and `redis_url` for production;
    PostgreSQL schemas are applied with `writesafe db upgrade` unless `auto_migrate=True`.
    `redact(text) -> text` adds a deployment's own rules to the built-in redaction of evidence
    and error messages (docs/service.md, "Redaction").
    """

    def __init__(
        self,
        database_url: str | None = None,
        redis_url: str | None = None,
        *,
        schema: str | None = None,
        redis_prefix: str | None = None,
        lease_seconds: float | None = None,
        wait_timeout: float | None = None,
        auto_migrate: bool | None = None,
        clock: Clock | None = None,
        codes: CodeRegistry | None = None,
        settings: WriteSafeSettings | None = None,
        redact: Redactor | None = None,
    ) -> None:
        overrides = {
            "database_url": database_url,
            "redis_url": redis_url,
            "db_schema": schema,
            "redis_prefix": redis_prefix,
            "lease_seconds": lease_seconds,
            "wait_timeout": wait_timeout,
        }
        given = {name: value for name, value in overrides.items() if value is not None}
        self.settings = overridden(settings or WriteSafeSettings(), given)
        _check_retention(self.settings, settle_after=0.0)
        self.codes = codes or CODES
        self._given_clock = clock  # a test's clock; without one the store's clock judges time
        self.redaction = Redaction(redact)
        self.ledger = Ledger.from_url(
            self.settings.database_url,
            schema=self.settings.db_schema,
            clock=clock,
            connect_timeout=self.settings.connect_timeout,
            budget=ConnectionBudget(
                max_connections=self.settings.db_max_connections,
                writer=self.settings.pool_size,
                idle_seconds=self.settings.db_idle_seconds,
                wait_seconds=self.settings.connect_timeout,
            ),
            lease_seconds=self.settings.lease_seconds,
        )
        self.keystore = _key_store(self.settings) if self.settings.redis_url else None
        self._guard = Guard(
            self.ledger,
            self.keystore,
            self.codes,
            GuardSettings(
                lease_seconds=self.settings.lease_seconds,
                retention=timedelta(seconds=self.settings.retention),
                restore_check_seconds=self.settings.restore_check_seconds,
                store_order=StoreOrder(threshold=self.settings.redis_first_repeats),
            ),
        )
        # An embedded ledger (a file of the application's own) migrates itself by default.
        embedded = self.ledger.file is not None
        self._auto_migrate = embedded if auto_migrate is None else auto_migrate
        self._tools: dict[str, Tool[Any]] = {}
        self._retry_budgets: dict[str, RetryBudget] = {}
        self._lookups: dict[str, LookupSpec] = {}
        self._reconciler: Reconciler | None = None
        self._ready = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the event loop being served
        self._loop_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self.sync = SyncWriteSafe(self)
        """The blocking face (`ws.sync.status(...)`, ...), for code without an event loop."""

    # -- registering tools ---------------------------------------------------------------

    def tool(
        self,
        name: str,
        *,
        lookup: Lookup | Callable[[LookupOperation], LookupResult] | None = None,
        adapter: Adapter | None = None,
        timeout: float | None = 30.0,
        max_executions: int = 3,
        key: Callable[..., object] | None = None,
        settle_after: float = 5.0,
        wait_timeout: float | None = None,
        lookup_timeout: float = DEFAULT_LOOKUP_TIMEOUT,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        dependency: str | None = None,
        read_only: bool = False,
    ) -> ToolDecorator:
        """Register a write as a guarded tool named `name`: an `async def`, or a plain `def`
        whose guarded form blocks (a `SyncTool`).

        The name is part of the fingerprint and of every ledger row, so keep it stable. Tools
        naming the same `dependency` (default: the tool's name) share one retry budget.

        `lookup(op)` answers whether an operation's effect exists downstream (`Found(result)`,
        `NotFound()`, `Unknown(reason)`), within `lookup_timeout` seconds; a `NotFound` counts only
        once `settle_after` seconds have passed since the execution was sent. Without a lookup an
        unknown outcome is never replayed: reconciliation escalates it to an operator.

        `read_only=True` declares a read (a lookup, a status query): no key is needed and nothing
        is recorded; retryable no-effect failures are still retried within `max_executions`.
        A plain `def` lookup runs in a worker thread.
        """
        validate_key(name, "name")
        if name in self._tools:
            raise ValueError(f"a tool named {name!r} is already registered")
        if max_executions < 1:
            raise ValueError("max_executions counts the first execution: it must be at least 1")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be positive (or None for no bound)")
        if lookup is not None and not inspect.iscoroutinefunction(lookup):
            lookup = threaded_lookup(cast(Callable[[LookupOperation], LookupResult], lookup))
        if settle_after < 0:
            raise ValueError("settle_after must not be negative")
        _check_retention(self.settings, settle_after)
        if lookup_timeout <= 0:
            raise ValueError("lookup_timeout must be positive")
        if wait_timeout is not None and wait_timeout < 0:
            raise ValueError(
                "wait_timeout must not be negative (0: a busy key is IN_PROGRESS at once)"
            )
        if read_only and lookup is not None:
            raise ValueError(f"{name}: a read-only tool has no effect for a lookup to find")

        @overload
        def register(  # type: ignore[overload-overlap]
            function: Callable[P, Coroutine[Any, Any, R]], /
        ) -> Tool[R, P]: ...
        @overload
        def register(function: Callable[P, R], /) -> SyncTool[R, P]: ...
        def register(function: Callable[..., Any], /) -> Tool[Any] | SyncTool[Any]:
            is_async = inspect.iscoroutinefunction(function)
            signature = inspect.signature(function)
            passes_key = KEY_PARAMETER in signature.parameters
            if passes_key and (
                signature.parameters[KEY_PARAMETER].kind is inspect.Parameter.POSITIONAL_ONLY
            ):
                raise TypeError(f"{name}: idempotency_key must be a keyword parameter")
            spec = ToolSpec(
                name=name,
                function=function if is_async else async_face(function),
                signature=signature.replace(
                    parameters=[p for p in signature.parameters.values() if p.name != KEY_PARAMETER]
                ),
                adapter=adapter or DEFAULT_ADAPTER,
                codec=ResultCodec(function, self.settings.max_result_bytes),
                timeout=timeout,
                max_executions=max_executions,
                wait_timeout=self.settings.wait_timeout if wait_timeout is None else wait_timeout,
                key_function=key,
                lookup=lookup,
                settle_after=settle_after,
                passes_key=passes_key,
                retry_policy=retry,
                retry_budget=self._retry_budgets.setdefault(dependency or name, RetryBudget()),
                lookup_timeout=lookup_timeout,
                redaction=self.redaction,
                read_only=read_only,
            )
            tool: Tool[Any] = Tool(self, spec)
            self._tools[name] = tool
            self._lookups[name] = spec.lookup_spec(self.codes)
            return tool if is_async else SyncTool(tool, self.sync, function)

        return register

    @property
    def tools(self) -> dict[str, Tool[Any]]:
        return dict(self._tools)

    @property
    def lookups(self) -> Mapping[str, LookupSpec]:
        """How reconciliation asks each registered tool's downstream system (by tool name)."""
        return self._lookups

    @staticmethod
    def current_operation() -> OperationContext:
        """Inside a guarded write: its key, scope, tool and execution number. Send the key
        downstream as a client reference / Idempotency-Key so that a lookup can search by it (a
        write may also declare an `idempotency_key` parameter to receive it). Outside one it
        raises `NoCurrentOperation`."""
        return current_operation()

    # -- lifecycle -----------------------------------------------------------------------

    def twin(self) -> WriteSafe:
        """A `WriteSafe` of the same configuration and tools with stores of its own, for another
        event loop (the sync facade's thread): the two meet only in the ledger and Redis."""
        twin = WriteSafe(
            settings=self.settings,
            clock=self._given_clock,  # none: the store's clock, as here
            codes=self.codes,
            auto_migrate=self._auto_migrate,
        )
        twin._tools, twin._lookups = self._tools, self._lookups
        twin._retry_budgets, twin.redaction = self._retry_budgets, self.redaction
        return twin

    @property
    def ready(self) -> bool:
        """Whether the schema has been checked (or created) by `start`."""
        return self._ready

    @property
    def started_guard(self) -> Guard | None:
        """The guard once `start` has run, for a thread without an event loop (the sync face's
        first look, `Guard.look_now`); None before."""
        return self._guard if self._ready else None

    async def start(self) -> None:
        """Create/upgrade the embedded schema, or check that a migrated one is current."""
        async with self._lock():
            await self._follow_running_loop()
            if self._ready:
                return
            if self._auto_migrate:
                await self.ledger.migrate()
            else:
                await self.ledger.check_schema()
            await self._guard.check_restores()  # a ledger restored since it was last opened
            self._ready = True

    async def guard(self) -> Guard:
        """The started guard; a ledger that cannot be reached means no write starts."""
        if not self._ready or self._loop is not asyncio.get_running_loop():
            try:
                await self.start()
            except LedgerNotMigrated:
                raise
            except LEDGER_ERRORS as error:
                raise self._guard.write_not_started(error) from error
        return self._guard

    async def close(self) -> None:
        """Close the stores, and the sync face's loop thread if one was started."""
        if self.sync.started:
            await asyncio.to_thread(self.sync.close)
        async with self._lock():
            await self._follow_running_loop()
        await self._guard.close()
        if self.keystore is not None:
            await self.keystore.close()
        await self.ledger.close()

    def _lock(self) -> asyncio.Lock:
        """The running event loop's lock for starting up (an asyncio lock serves one loop)."""
        loop = asyncio.get_running_loop()
        if self._loop_lock is None or self._loop_lock[0] is not loop:
            self._loop_lock = (loop, asyncio.Lock())
        return self._loop_lock[1]

    async def _follow_running_loop(self) -> None:
        """Serve the running event loop, dropping what belongs to the one served before.

        Connections, pool queues and futures belong to the loop they were made on; a test suite
        with a loop per test, or a script that calls `asyncio.run` twice, moves on to a new loop
        after the old one ended. One loop at a time: a move assumes the old loop's calls are
        over. Called under `_lock()`, so the running loop's other calls wait for the move.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            self._guard.forget_loop()
            if self.keystore is not None:
                self.keystore.forget_loop()
            await self.ledger.forget_loop()
        self._loop = loop

    async def __aenter__(self) -> WriteSafe:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    # -- reading -------------------------------------------------------------------------

    async def status(self, key: str, *, scope: str = DEFAULT_SCOPE) -> OperationStatus | None:
        """What happened to the operation under `key`; None for a key with no operation (never
        used, or pruned: `expired` tells them apart)."""
        await self.guard()
        operation = await self.ledger.get(validate_key(scope, "scope"), validate_key(key))
        if operation is None:
            return None
        return OperationStatus.from_records(
            operation, await self.ledger.attempts(operation.id), self.codes
        )

    async def expired(self, key: str, *, scope: str = DEFAULT_SCOPE) -> datetime | None:
        """When retention pruned the operation under `key` (its status is then "expired", not
        "never seen"); None if it never did. A key that has a newer operation since may have
        both: `status` is what the key holds now."""
        await self.guard()
        return await expired_at(self.ledger, validate_key(scope, "scope"), validate_key(key))

    # -- reconciliation ------------------------------------------------------------------

    def reconciler(self) -> Reconciler:
        """This instance's reconciler (one per `WriteSafe`; on SQLite its passes take turns with
        other processes' passes)."""
        if self._reconciler is None:
            settings = self.settings
            policy = ReconcilePolicy(
                max_checks=settings.reconcile_max_checks,
                backoff_seconds=settings.reconcile_backoff,
                backoff_max_seconds=settings.reconcile_backoff_max,
                lease_seconds=settings.reconcile_lease,
                batch_size=settings.reconcile_batch,
            )
            self._reconciler = Reconciler(self.ledger, self._lookups, self.codes, policy)
        return self._reconciler

    @traced_reconcile
    async def reconcile(
        self,
        *,
        limit: int | None = None,
        older_than: float = 0.0,
        tool: str | None = None,
        scope: str | None = None,
        on_progress: Callable[[ReconcileReport], None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> ReconcileReport:
        """One reconciliation pass over the operations due now; never executes a write.

        At most `limit` operations (default: all that are due), sent at least `older_than`
        seconds ago, of `tool` (default: every registered tool), in `scope` (default: every
        scope). Raises `ReconcilerBusy` on a SQLite ledger another reconciler holds.
        """
        if limit is not None and limit < 1:
            raise invalid_input("limit", "limit must be at least 1")
        if older_than < 0:
            raise invalid_input("older_than", "older_than must not be negative")
        if tool is not None and tool not in self._tools:
            raise invalid_input("tool", f"no tool named {tool!r} is registered")
        await self.guard()
        if scope is not None:
            scope = validate_key(scope, "scope")
        return await self.reconciler().run(
            limit=limit,
            older_than=older_than,
            tool=tool,
            scope=scope,
            on_progress=on_progress,
            stop=stop,
        )

    async def resolve(
        self,
        key: str,
        *,
        scope: str = DEFAULT_SCOPE,
        outcome: Resolution,
        reason: str,
        actor: str,
        result: Any = None,
        evidence: Mapping[str, Any] | None = None,
    ) -> OperationStatus:
        """An operator settles a `needs_attention` or `outcome_unknown` operation, on the record
        (who, why, evidence; `outcome_unknown` only with evidence).

        `succeeded` stores `result` as the operation's result (callers with the key get it); it
        must fit the tool's declared return type (an `idempotent_route` stores
        `{"status_code": …, "body": …}`), else INPUT_INVALID. `failed` declares the effect
        absent. Any other state raises `ResolutionRefused` (`OperationNotFound` for an unknown
        key).
        """
        scope, key = validate_key(scope, "scope"), validate_key(key)
        if outcome not in ("succeeded", "failed"):
            raise invalid_input("outcome", "outcome must be 'succeeded' or 'failed'")
        if outcome == "failed" and result is not None:
            raise invalid_input("result", "only a succeeded resolution carries a result")
        reason = _required_text(reason, "reason", allowed="\t\r\n")  # a reason may have lines
        actor = _required_text(actor, "actor")
        if len(actor) > 255:
            raise invalid_input("actor", "actor is limited to 255 characters")
        if evidence is not None:
            try:
                evidence = loads_json(canonical_json(dict(evidence)))
            except (ValueError, TypeError):
                raise invalid_input("evidence", "evidence must be a JSON object") from None
        await self.guard()
        try:
            operation = await resolve_operation(
                self.ledger,
                self.codes,
                scope=scope,
                key=key,
                outcome=outcome,
                encode=self._encode_result,
                result=result,
                reason=reason,
                actor=actor,
                evidence=evidence,
            )
        except EvidenceRequired as error:
            raise invalid_input("evidence", str(error)) from None
        return OperationStatus.from_records(
            operation, await self.ledger.attempts(operation.id), self.codes
        )

    def _encode_result(self, tool: str, result: Any) -> str:
        registered = self._tools.get(tool)
        try:
            if registered is None:  # not registered here: no declared form to check against
                return canonical_json(result)
            return registered.spec.codec.check(result)
        except ResultMisfit as misfit:
            where, what = misfit.problems[0] if misfit.problems else ("", "does not fit")
            message = f"the result does not fit what {tool!r} stores: {where or 'result'}: {what}"
            raise invalid_input("result", message) from None
        except ResultNotStored as unstorable:
            raise invalid_input("result", str(unstorable)) from None
        except (ValueError, TypeError):
            raise invalid_input("result", "the result has no JSON form") from None


def _check_retention(settings: WriteSafeSettings, settle_after: float) -> None:
    """Refuse a retention that could prune a key while its write may still land."""
    refusal = retention_refusal(settings.retention, settings.lease_seconds, settle_after)
    if refusal is not None:
        raise SettingsRefused(refusal)


def _required_text(value: object, field: str, *, allowed: str = "") -> str:
    if not isinstance(value, str) or not value.strip():
        raise invalid_input(field, f"{field} is required: say who resolved it and why")
    if len(value) > MAX_REASON_LENGTH:
        raise invalid_input(field, f"{field} is limited to {MAX_REASON_LENGTH} characters")
    return refuse_hidden_characters(value.strip(), field, allowed=allowed)
