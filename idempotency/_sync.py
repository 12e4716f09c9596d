"""Sync tools and the blocking face of a `WriteSafe`, for code that has no event loop.

Design: one event loop on a thread of its own per `WriteSafe` and process (`LoopThread`), serving
a *twin* `WriteSafe` — same settings and tools, stores of its own. The guard runs there, as it does
for async callers, so a sync call has the same claim, fence, lease renewal, timeout, retries and
envelopes; the async path and the sync path meet only in the ledger and Redis, and neither moves
the other's connections between loops (a `WriteSafe` follows one loop at a time).

The write itself runs on the *calling* thread: the guard hands it back and waits for it while its
loop keeps renewing the lease and watching the timeout. That keeps thread-bound state where the
write expects it (a Django database connection or transaction, a Celery task's request). A write
still running at its timeout is recorded OUTCOME_UNKNOWN at the timeout; a thread cannot be
stopped, so the call raises that envelope when the function returns.

Not `asyncio.run` per call: that builds a loop, new connections and a new schema check on every
call, and cannot run inside a running loop. A loop thread works from any thread, inside a running
loop too (that loop is blocked for the call, as by any blocking function), at the cost of thread
hand-offs (`bench.guard` measures them). The calling thread first looks at the key itself,
blocking, where the guard would look first (`Guard.look_now`: Redis's claim, or without Redis the
embedded ledger's local read): a finished key is answered there with no hand-off at all. Any other
call makes four (to the loop, the write back to the caller, its result to the loop, the answer
back), and its first attempt goes on from the Redis claim the calling thread made.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
import queue
import threading
from collections.abc import Callable, Coroutine, Mapping
from contextvars import Context, ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from writesafe.idempotency._context import (
    OperationContext,
    active_operation,
    reset_current,
    set_current,
)
from writesafe.idempotency._errors import WriteSafeError
from writesafe.idempotency._keys import DEFAULT_SCOPE
from writesafe.idempotency._tool import CallOptions, Invocation, P, Tool, split_options
from writesafe.reconciler import LookupOperation, LookupResult, OperationStatus, ReconcileReport
from writesafe.reconciler._resolve import Resolution

if TYPE_CHECKING:
    from writesafe.idempotency._writesafe import WriteSafe

R = TypeVar("R")
T = TypeVar("T")

# Bounds the close of the loop thread's stores (flushing cache fills, closing pools).
CLOSE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class _Write:
    """A write the guard handed back to the thread that called it."""

    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    operation: OperationContext | None
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[Any]

    def run(self) -> None:
        token = set_current(self.operation)
        try:
            value = self.function(*self.args, **self.kwargs)
        except Exception as error:
            self._settle(error, failed=True)
        else:
            self._settle(value, failed=False)
        finally:
            reset_current(token)

    def _settle(self, outcome: Any, *, failed: bool) -> None:
        def settle() -> None:
            if self.done.done():  # the guard stopped waiting: the timeout, or a cancelled call
                return
            if failed:
                self.done.set_exception(outcome)
            else:
                self.done.set_result(outcome)

        with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile
            self.loop.call_soon_threadsafe(settle)


@dataclass(frozen=True, slots=True)
class _Ended:
    """How a call's task ended: the last item its blocked caller reads."""

    value: Any = None
    error: BaseException | None = None

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class _Caller:
    """One blocked sync call: waits for its answer, and runs its write when the guard hands it."""

    def __init__(self, call: Coroutine[Any, Any, Any]) -> None:
        self._call = call  # what the call's task runs
        self._inbox: queue.SimpleQueue[_Write | _Ended] = queue.SimpleQueue()

    async def execute(self, function: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """On the loop: have the calling thread run the write, and wait for it."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        self._inbox.put(_Write(function, args, kwargs, active_operation(), loop, done))
        return await done

    def end(self, ended: _Ended) -> None:
        """Hand the caller its answer; one that has its answer already reads no more."""
        self._inbox.put(ended)

    def abandon(self) -> None:
        """After the close cancelled the call's task: tell the caller, whose task may have been
        cancelled before its first step (then it handed over nothing, and its call never ran:
        closed here, not left to warn that it was never awaited). A no-op for one that ended."""
        self._call.close()
        self.end(_Ended(error=asyncio.CancelledError()))

    def wait(self, loop: asyncio.AbstractEventLoop, calls: dict[asyncio.Task[Any], _Caller]) -> Any:
        """Run the call as a task on `loop`, kept in `calls` while it runs, blocking until it
        ends and running handed-back writes.

        One hop to the loop and one back (plus two for a write): a plain task and a queue, since
        `run_coroutine_threadsafe`'s chained futures cost as much again as the hops themselves.
        The task hands over its answer in its last step, not in a done callback, which would
        cost the loop another turn before the caller wakes.
        """
        context = Context()  # the task's own: the caller's context variables stay with the caller
        context.run(_caller.set, self)
        started: list[asyncio.Task[None]] = []

        def start() -> None:
            task = loop.create_task(self._answer(calls), context=context)
            calls[task] = self
            started.append(task)

        loop.call_soon_threadsafe(start)
        try:
            while isinstance(item := self._inbox.get(), _Write):
                item.run()
        except BaseException:
            # Interrupted (KeyboardInterrupt, SystemExit): the guard's task is cancelled and
            # records what it knows, as for an async caller that goes away. `start` ran first.
            # A task cancelled before its first step leaves the Redis lease its call's look
            # took to run out, as a crashed caller's does (the ledger has no row of it).
            loop.call_soon_threadsafe(lambda: started[0].cancel())
            raise
        return item.result()

    async def _answer(self, calls: dict[asyncio.Task[Any], _Caller]) -> None:
        """The call's task: run the call and hand its end to the caller."""
        try:
            value = await self._call
        except Exception as error:  # the caller's to raise: the task itself ends quietly
            self.end(_Ended(error=error))
        except BaseException as error:  # cancelled, or the process stops: the task ends so too
            self.end(_Ended(error=error))
            raise
        else:
            self.end(_Ended(value))
        finally:
            calls.pop(asyncio.current_task(), None)  # type: ignore[arg-type]


_caller: ContextVar[_Caller | None] = ContextVar("writesafe_sync_caller", default=None)


def async_face(function: Callable[..., R]) -> Callable[..., Coroutine[Any, Any, R]]:
    """The coroutine function the guard runs for a plain `def` write.

    Under a sync call the calling thread runs it; awaited by async code (`ws.tools[name]`, the
    MCP integration), it runs in a worker thread so that it does not block the event loop.
    """

    @functools.wraps(function)
    async def run(*args: Any, **kwargs: Any) -> R:
        caller = _caller.get()
        if caller is None:
            return await asyncio.to_thread(function, *args, **kwargs)
        value: R = await caller.execute(function, args, kwargs)
        return value

    return run


def threaded_lookup(
    lookup: Callable[[LookupOperation], LookupResult],
) -> Callable[[LookupOperation], Coroutine[Any, Any, LookupResult]]:
    """A plain `def` lookup, run in a worker thread; its `lookup_timeout` bounds the wait, not
    the thread (which is left to finish)."""

    @functools.wraps(lookup)
    async def run(operation: LookupOperation) -> LookupResult:
        return await asyncio.to_thread(lookup, operation)

    return run


class LoopThread:
    """An event loop on a daemon thread, serving the twin `WriteSafe` of one process."""

    def __init__(self, twin: WriteSafe) -> None:
        self.twin = twin
        self.pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        # The calls running, and their callers; touched on the loop.
        self._calls: dict[asyncio.Task[Any], _Caller] = {}
        # Its callers are blocked on it: while it serves one alone, an embedded write may run on
        # the loop's own thread, saving the hops to the SQLite writer's thread and back.
        twin.ledger.serve_blocking_callers(lambda: len(self._calls) <= 1)
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="writesafe-sync", daemon=True
        )
        self._thread.start()
        atexit.register(self._close_at_exit)

    def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run `make()` on the loop and block for its answer, running handed-back writes."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync writesafe call cannot be made from its own loop thread")
        value: T = _Caller(make()).wait(self._loop, self._calls)
        return value

    def close(self) -> None:
        """Close the twin's stores and end the thread (a forked child leaves its parent's alone)."""
        atexit.unregister(self._close_at_exit)
        if os.getpid() != self.pid or self._loop.is_closed():
            return
        try:
            ending = _end_calls_and_close(self.twin, self._calls)
            closing = asyncio.run_coroutine_threadsafe(ending, self._loop)
            with contextlib.suppress(TimeoutError):
                closing.result(CLOSE_SECONDS)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def _close_at_exit(self) -> None:
        """At interpreter exit the thread pools already refuse work, and some stores close
        through one (SQLite's writer): close what can be closed. What cannot needs no closing
        then: committed writes are durable, and the servers end the sessions of a closed socket."""
        with contextlib.suppress(RuntimeError):
            self.close()


async def _end_calls_and_close(twin: WriteSafe, running: dict[asyncio.Task[Any], _Caller]) -> None:
    """Cancel the calls still `running` (their callers get `CancelledError` instead of waiting
    forever on a loop that stops; each records what it knows first), then close the stores.

    Only the calls: the cache fills written behind answers already given are the guard's to
    finish as it closes, so that a process that answers and exits at once leaves the outcome in
    Redis, not its lease (a fill's first command may still be opening its connection)."""
    calls = list(running.items())
    for task, _ in calls:
        task.cancel()
    await asyncio.gather(*(task for task, _ in calls), return_exceptions=True)
    for _, caller in calls:
        caller.abandon()
    await twin.close()


class SyncWriteSafe:
    """The blocking face of a `WriteSafe` (`ws.sync`): its calls, for code with no event loop.

    Each process gets its own loop thread and stores on first use; a child forked after that
    (gunicorn, Celery's prefork pool) starts its own and leaves the parent's untouched, since
    their sockets are shared with the parent.
    """

    def __init__(self, owner: WriteSafe) -> None:
        self._owner = owner
        self._lock = threading.Lock()
        self._thread: LoopThread | None = None
        self._inherited: list[LoopThread] = []  # a parent's, kept so it is never finalized here

    @property
    def started(self) -> bool:
        """Whether this process has a loop thread running (its stores open)."""
        return self._thread is not None and self._thread.pid == os.getpid()

    def _loop_thread(self) -> LoopThread:
        with self._lock:
            thread = self._thread
            if thread is not None and thread.pid != os.getpid():
                self._inherited.append(thread)
                thread = None
            if thread is None:
                thread = self._thread = LoopThread(self._owner.twin())
            return thread

    def _run(self, call: Callable[[WriteSafe], Coroutine[Any, Any, T]]) -> T:
        loop_thread = self._loop_thread()
        return loop_thread.run(lambda: call(loop_thread.twin))

    def start(self) -> None:
        """`WriteSafe.start`, blocking: check (or create) the schema before the first call."""
        self._run(lambda twin: twin.start())

    def status(self, key: str, *, scope: str = DEFAULT_SCOPE) -> OperationStatus | None:
        """`WriteSafe.status`, blocking."""
        return self._run(lambda twin: twin.status(key, scope=scope))

    def expired(self, key: str, *, scope: str = DEFAULT_SCOPE) -> datetime | None:
        """`WriteSafe.expired`, blocking: when retention pruned the key's operation, if it did."""
        return self._run(lambda twin: twin.expired(key, scope=scope))

    def reconcile(
        self,
        *,
        limit: int | None = None,
        older_than: float = 0.0,
        tool: str | None = None,
        on_progress: Callable[[ReconcileReport], None] | None = None,
    ) -> ReconcileReport:
        """`WriteSafe.reconcile`, blocking (`on_progress` is called on the loop thread)."""
        return self._run(
            lambda twin: twin.reconcile(
                limit=limit, older_than=older_than, tool=tool, on_progress=on_progress
            )
        )

    def resolve(
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
        """`WriteSafe.resolve`, blocking."""
        return self._run(
            lambda twin: twin.resolve(
                key,
                scope=scope,
                outcome=outcome,
                reason=reason,
                actor=actor,
                result=result,
                evidence=evidence,
            )
        )

    def close(self) -> None:
        """Close this process's loop thread and its stores; the next call starts new ones."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.close()


class SyncTool(Generic[R, P]):
    """A guarded plain `def` write: `tool.key("ord-7", scope="tenant-a")(order)` blocks and
    returns the result, or raises `WriteSafeError`. Typed as `Tool` is (see there)."""

    def __init__(self, tool: Tool[R, P], facade: SyncWriteSafe, function: Callable[P, R]) -> None:
        self.tool = tool  # the async face: what `ws.tools` and the async integrations take
        self._facade = facade
        functools.update_wrapper(self, function)

    @property
    def name(self) -> str:
        return self.tool.name

    def key(
        self,
        key: str | None = None,
        /,
        *,
        scope: str = DEFAULT_SCOPE,
        auth_context: object = None,
    ) -> KeyedSyncTool[R, P]:
        """This tool under `key` in `scope` (`Tool.key`); call what it returns."""
        return KeyedSyncTool(self, CallOptions(key, scope, auth_context))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        options, rest = split_options(self.tool.spec, kwargs)
        return self.call(options, args, rest)

    def call(self, options: CallOptions, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        """Run one call with the function's own keyword arguments in `kwargs`."""
        return self.invoke(
            args, kwargs, key=options.key, scope=options.scope, auth_context=options.auth_context
        ).value

    def invoke(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        key: str | None,
        scope: str = DEFAULT_SCOPE,
        auth_context: object = None,
        key_from_arguments: bool = False,
    ) -> Invocation[R]:
        """Like `Tool.invoke`, blocking: the result and whether it was replayed. The call's
        first look is made on this thread (`Guard.look_now`), which answers a finished key;
        anything else runs on the loop thread, from what the look found."""
        loop_thread = self._facade._loop_thread()
        twin = loop_thread.twin
        try:
            call = self.tool.prepare(args, kwargs, key, scope, auth_context, key_from_arguments)
        except WriteSafeError:
            loop_thread.run(twin.guard)  # an unreachable ledger is told first, as when async
            raise
        guard = twin.started_guard  # before the first call has checked the schema: none yet
        look = None if guard is None else guard.look_now(call)
        if look is not None and look.answer is not None:
            return Invocation(look.answer.value, True, call.key)
        return loop_thread.run(lambda: self.tool.run(call, through=twin, look=look))


class KeyedSyncTool(Generic[R, P]):
    """A sync tool with its key, scope and auth context chosen (`SyncTool.key`)."""

    __slots__ = ("_options", "_tool")

    def __init__(self, tool: SyncTool[R, P], options: CallOptions) -> None:
        self._tool = tool
        self._options = options

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        options, rest = split_options(self._tool.tool.spec, kwargs, self._options)
        return self._tool.call(options, args, rest)
