"""The guard: at most one execution per `(scope, key)`, with durable intent before the effect.

A call goes: Redis (cached result, or the lease) → the ledger claim (authoritative) → execute →
record the outcome (fenced) → answer, and cache the outcome behind the answer. Redis only ever
saves round trips; every decision to execute is taken by the ledger, so losing Redis data can
never cause a second execution. A tool whose calls are seldom repeats skips Redis, and the
embedded ledger's local read, and goes to the ledger claim directly (`reconciler._store_order`):
they would save those calls nothing. A caller on a thread without the guard's event loop (the
sync face) makes the call's first look itself, blocking (`Guard.look_now`): a finished key is
answered there, anything else goes on to `Guard.run` with what the look found.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
)

from writesafe.idempotency._attempts import retried
from writesafe.idempotency._context import OperationContext, reset_current, set_current
from writesafe.idempotency._errors import WriteSafeError
from writesafe.idempotency._fence import Fence, LeaseLost
from writesafe.idempotency._fills import CacheFills
from writesafe.idempotency._gate import Resumed, replay_gate
from writesafe.idempotency._leases import HeldLease, LeaseKeeper
from writesafe.idempotency._logging import logged_call, operation_logged
from writesafe.idempotency._metrics import RETRIES, RETRIES_THROTTLED, answered
from writesafe.idempotency._reads import run_read
from writesafe.idempotency._recording import LEDGER_ERRORS, record_outcome
from writesafe.idempotency._replays import decoded
from writesafe.idempotency._restore_watch import RestoreWatch
from writesafe.idempotency._restored_gate import first_run_gate
from writesafe.idempotency._results import ResultNotStored
from writesafe.idempotency._spec import GuardedCall
from writesafe.idempotency._store_answers import (
    CachedOutcome,
    LeaseState,
    StoreClaim,
    lease_token,
    same_payload,
)
from writesafe.idempotency._tracing import traced_call, tracing_on
from writesafe.ledger import Claim, Intent, LeaseHeld, Ledger, OperationRecord, Outcome, Status
from writesafe.ledger._task_deadlines import TaskDeadlines
from writesafe.reconciler import Classification, CodeRegistry, ErrorEnvelope, OperationInfo
from writesafe.reconciler._adapters import answer_failure, failure_of
from writesafe.reconciler._admission import stored_envelope
from writesafe.reconciler._continuation import (
    Continuation,
    decide_continuation,
    failed_operation,
    stored_failure,
    waits_for_delay,
)
from writesafe.reconciler._decisions import (
    FIRST_POLL_SECONDS,
    RowAction,
    decide_row,
    held_for_ms,
    next_poll,
)
from writesafe.reconciler._failures import after_failure, cut_short, failure_outcome, not_stored
from writesafe.reconciler._ledger_causes import ledger_failure
from writesafe.reconciler._misfit import ResultMisfit, misfit_outcome
from writesafe.reconciler._refusals import (
    in_progress,
    key_reused,
    ledger_lost,
    unrecorded,
    write_not_started,
)
from writesafe.reconciler._restored import FirstRun, decide_first_run
from writesafe.reconciler._retry import RetrySignal, defer, replay_timed
from writesafe.reconciler._store_order import StoreOrder
from writesafe.reconciler._views import operation_info

if TYPE_CHECKING:
    from writesafe.idempotency._keystore import RedisKeyStore

logger = logging.getLogger("writesafe")


@dataclass(frozen=True, slots=True)
class GuardSettings:
    """Bounds of the guard itself (per tool bounds live on the tool)."""

    lease_seconds: float = 15.0
    record_retry_seconds: float = 2.0
    retention: timedelta = timedelta(days=1)  # how long a restore stays open (ledger._restore)
    restore_check_seconds: float = 10.0  # how stale the cached "not restored" may be
    store_order: StoreOrder = field(default_factory=StoreOrder)  # when Redis is asked first


@dataclass(frozen=True, slots=True)
class _Answer:
    value: Any
    kind: str  # "executed", "replayed" or "reconciled", for metrics
    succeeded: OperationRecord | None  # the ledger row the key store may cache


@dataclass(frozen=True, slots=True)
class Look:
    """A call's first look at its key, made by `Guard.look_now` before the guard's event loop
    takes the call: the answer when the look settles the call, else Redis's answer to the claim
    made for `owner`, which the call's first attempt goes on from."""

    owner: str
    store: StoreClaim | None = None  # None: no Redis (the look read the embedded ledger)
    answer: _Answer | None = None  # a replay


class _Retryable(RetrySignal):
    """A failed execution that proved no effect, recorded `failed`, and may run again within
    the budget once the wait is over."""

    def __init__(self, envelope: ErrorEnvelope, failed: OperationRecord) -> None:
        super().__init__(envelope)
        self.failed = failed


@dataclass(frozen=True, slots=True)
class _Busy:
    retry_after_ms: int  # 0: the row changed under us, look again at once


class Guard:
    """Runs guarded calls against one ledger and, optionally, one Redis key store."""

    def __init__(
        self,
        ledger: Ledger,
        keystore: RedisKeyStore | None,
        codes: CodeRegistry,
        settings: GuardSettings,
    ) -> None:
        self.ledger = ledger
        self.keystore = keystore
        self.codes = codes
        self.settings = settings
        # Whether a store answers a repeat before the claim's write, which `look_now` can ask
        # without the loop: Redis's claim, or the ledger's local read (a server's ledger alone
        # has no read without a round trip on the loop's pool).
        self._looks_now = keystore is not None or ledger.reads_locally
        # Each tool's running share of calls that found their key known (`StoreOrder`), kept
        # where a store is asked by it: a hint shared by the loop and the sync face's threads,
        # never a correctness input.
        self._repeats: dict[str, float] = {}
        self._restores = RestoreWatch(
            ledger,
            keystore,
            retention=settings.retention,
            every=settings.restore_check_seconds,
        )
        self._start_loop_state()
        # One guarded call running on the loop: the embedded writer may commit its intent there.
        ledger.serve_async_callers(lambda: len(self._local) <= 1)

    def _start_loop_state(self) -> None:
        """What the guard keeps of the calls running on the current event loop."""
        self._leases = LeaseKeeper(
            self.ledger, self.keystore, self.settings.lease_seconds, LEDGER_ERRORS
        )
        self._fills = CacheFills()
        self._run_deadlines = TaskDeadlines()
        # In-process single flight: same-key, same-payload calls in this process wait on the
        # first one's future instead of polling the stores.
        self._local: dict[tuple[str, str], tuple[str, asyncio.Future[None]]] = {}

    def forget_loop(self) -> None:
        """Drop what the calls of an event loop this process has left kept here. Those calls
        are gone: their leases are no longer renewed, so they run out and reconciliation takes
        over operations they left in flight, as after a crash."""
        self._restores.forget_loop()
        self._start_loop_state()

    async def check_restores(self) -> None:
        """Check now whether the ledger was restored (as the process opens it), and raise its
        marks; first executions then rely on the cached answer for a while."""
        await self._restores.check()

    async def flush(self) -> None:
        """Wait for the Redis cache writes still running behind answers already given."""
        await self._fills.drain()

    async def close(self) -> None:
        await self.flush()
        await self._leases.close()
        # Raise the ledger's marks to what this process committed, for a restore to be seen.
        with contextlib.suppress(*LEDGER_ERRORS):
            await self._restores.last_check(within=self.settings.record_retry_seconds)

    @logged_call
    @traced_call
    async def run(self, call: GuardedCall, look: Look | None = None) -> tuple[Any, bool]:
        """The call's result, and whether it was replayed rather than executed by this call
        (integrations tell their callers, e.g. HTTP `Idempotent-Replayed: true`); `look`: the
        call's first look, if `look_now` made it."""
        started = time.perf_counter()
        answer = "error"
        try:
            if call.tool.read_only:
                value = await run_read(call, self.codes, self.ledger.clock, self._run_deadlines)
                answer = "executed"
                return value, False
            result = await self._call(call, look)
            answer = result.kind
            return result.value, result.kind != "executed"
        except WriteSafeError as error:
            answer = error.code
            raise
        finally:
            _count(call, answer, started)

    def look_now(self, call: GuardedCall) -> Look | None:
        """The call's first look at its key, blocking, on a thread that does not run the guard's
        event loop (the sync face's calling thread): where the guard's first attempt would look
        first, without the two thread hand-offs of asking the loop. With Redis: the claim the
        attempt would send (the lease, or the cached outcome); without: the embedded ledger's
        local read (PostgreSQL has none). A finished key is answered here (a replay; KEY_REUSED
        raised), counted as `run` counts its answers; else the look is for `run` to go on from.
        None: nothing looked (a read, a traced call: its span is made by `run`, or PostgreSQL
        without Redis, which has nothing to look at here)."""
        if call.tool.read_only or not self._looks_now or tracing_on():
            return None
        started = time.perf_counter()
        answer: str | None = "error"  # None: not answered here, `run` counts the call
        try:
            with operation_logged(call.key, call.scope, call.tool.name):
                look = self._look(call)
            answer = None if look is None or look.answer is None else look.answer.kind
            return look
        except WriteSafeError as error:
            answer = error.code
            raise
        finally:
            if answer is not None:
                _count(call, answer, started)

    def _look(self, call: GuardedCall) -> Look | None:
        owner = secrets.token_hex(16)
        if self._asks_redis_first(call):
            assert self.keystore is not None
            token = lease_token(owner, call.fingerprint)
            lease_seconds = self.settings.lease_seconds
            store = self.keystore.claim_now(call.scope, call.key, token, lease_seconds)
            if store.outcome is not None:
                self._note(call, repeat=True)
                return Look(owner, store, self._replay_cached(call, store.outcome))
            return Look(owner, store)
        row = self._peeked(call)
        if row is None:
            return None
        action = decide_row(row, created=False, owner=owner, fingerprint=call.fingerprint)
        answer = self._settled(call, row, action)
        if answer is None:
            return None
        self._note(call, repeat=True)
        return Look(owner, answer=answer)

    def _asks_redis_first(self, call: GuardedCall) -> bool:
        """Whether the call asks Redis before the ledger: while its tool's calls are often
        repeats, and always while the ledger is restored (Redis may hold what it forgot)."""
        if self.keystore is None:
            return False
        return self._restores.open or self.settings.store_order.asks_first(self._share(call))

    def _peeks_first(self, call: GuardedCall) -> bool:
        """Whether the call reads the embedded ledger's row before claiming the key: while its
        tool's calls are often repeats. A read that finds no row costs a first execution a query
        and, beside the writer's busy thread, the GIL's hand-offs (docs/performance.md)."""
        return self.ledger.reads_locally and self.settings.store_order.asks_first(self._share(call))

    def _peeked(self, call: GuardedCall) -> OperationRecord | None:
        """The row holding the call's key as the embedded ledger last committed it, read on this
        thread without a write, where the call peeks first; None: the claim's write decides."""
        return self.ledger.peek(call.scope, call.key) if self._peeks_first(call) else None

    def _note(self, call: GuardedCall, *, repeat: bool) -> None:
        """Count the call into its tool's share of repeats: it found its key known, or new."""
        if self._looks_now:
            share = self.settings.store_order.after(self._share(call), repeat=repeat)
            self._repeats[call.tool.name] = share

    def _share(self, call: GuardedCall) -> float:
        """The share of repeats among the recent calls of `call`'s tool."""
        return self._repeats.get(call.tool.name, self.settings.store_order.start)

    async def _call(self, call: GuardedCall, look: Look | None) -> _Answer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + call.tool.wait_timeout
        slot = (call.scope, call.key)
        local = self._local.get(slot)
        if local is not None:
            fingerprint, leader = local
            if fingerprint == call.fingerprint:
                # What the look found is stale once the leader has finished: look again.
                await self._let_go(call, look)
                look = None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(leader), deadline - loop.time())
                if not leader.done():
                    raise await self._in_progress(call, None)
            # A different payload does not wait: the stores answer it (KEY_REUSED, or a
            # continuation once the first call has failed).
            return await self._lead(call, deadline, look)
        done: asyncio.Future[None] = loop.create_future()
        self._local[slot] = (call.fingerprint, done)
        try:
            return await self._lead(call, deadline, look)
        finally:
            if self._local.get(slot, (None, None))[1] is done:
                del self._local[slot]
            done.set_result(None)

    async def _let_go(self, call: GuardedCall, look: Look | None) -> None:
        """Release the Redis lease `look` took, for a call that will not go on from it."""
        if look is None or look.store is None or look.store.state is not LeaseState.ACQUIRED:
            return
        assert self.keystore is not None
        token = lease_token(look.owner, call.fingerprint)
        await self.keystore.release(call.scope, call.key, token)

    async def _lead(self, call: GuardedCall, deadline: float, look: Look | None) -> _Answer:
        loop = asyncio.get_running_loop()
        pause = FIRST_POLL_SECONDS
        await self._fills.settled((call.scope, call.key))
        # Decided once: a call polling a busy key keeps to the store it asked first.
        redis_first = self._asks_redis_first(call) if look is None else look.store is not None
        first_look = True
        while True:
            step = await self._attempt(
                call, first_look=first_look, redis_first=redis_first, look=look
            )
            first_look, look = False, None
            if isinstance(step, _Answer):
                return step
            poll = next_poll(step.retry_after_ms, pause, deadline - loop.time())
            if poll is None:
                raise await self._in_progress(call, step.retry_after_ms)
            if poll.sleep:
                await asyncio.sleep(poll.sleep)
            pause = poll.pause

    async def _attempt(
        self, call: GuardedCall, *, first_look: bool, redis_first: bool, look: Look | None = None
    ) -> _Answer | _Busy:
        """One try at the call; `first_look`: the call's first, which checks a busy lease against
        the ledger once and counts the call into its tool's share of repeats; `redis_first`:
        whether it claims in Redis before the ledger; `look`: its Redis claim, made already by
        `look_now`."""
        owner = secrets.token_hex(16) if look is None else look.owner
        token = lease_token(owner, call.fingerprint)
        holds_store_lease = False
        answer: _Answer | _Busy | None = None
        if redis_first:
            assert self.keystore is not None
            if look is not None and look.store is not None:
                store = look.store
            else:
                store = await self.keystore.claim(
                    call.scope, call.key, token, self.settings.lease_seconds
                )
            if store.outcome is not None:
                if first_look:
                    self._note(call, repeat=True)
                return self._replay_cached(call, store.outcome)
            if store.state is LeaseState.BUSY and same_payload(store.holder, call.fingerprint):
                if first_look:
                    self._note(call, repeat=True)
                finished = await self._finished_in_ledger(call) if first_look else None
                return finished or _Busy(held_for_ms(0))
            holds_store_lease = store.state is LeaseState.ACQUIRED
        try:
            leased_at = time.monotonic()  # the claim sets the lease no earlier than this
            peeked = None if redis_first else self._peeked(call)
            if peeked is not None:
                claim = Claim(peeked, created=False)
            else:
                claim = await self._claim(call, owner)
            if first_look:
                self._note(call, repeat=not claim.created)
            try:
                answer = await self._proceed(call, claim, owner, leased_at)
            except LEDGER_ERRORS as error:
                raise self._ledger_lost(call, claim.operation, error) from error
            return answer
        finally:
            if holds_store_lease:
                assert self.keystore is not None
                if isinstance(answer, _Answer) and answer.succeeded is not None:
                    self._cache_behind(call, answer.succeeded)
                else:
                    await self.keystore.release(call.scope, call.key, token)

    def _cache_behind(self, call: GuardedCall, succeeded: OperationRecord) -> None:
        """Copy the outcome to Redis behind the answer: the ledger has it, the caller goes on."""
        assert self.keystore is not None
        fill = self.keystore.cache(call.scope, call.key, CachedOutcome.of(succeeded))
        self._fills.start((call.scope, call.key), fill)

    async def _finished_in_ledger(self, call: GuardedCall) -> _Answer | None:
        """The ledger's answer for a key whose Redis lease outlived its write.

        A writer that crashed after recording its outcome, or whose cache fill never ran (its
        event loop ended first), leaves its lease in Redis until the lease runs out; the ledger
        knows the operation succeeded, so a duplicate gets the result now and the copy is
        repaired. A lease that is really held costs one read here.
        """
        try:
            row = await self.ledger.get(call.scope, call.key)
        except LEDGER_ERRORS:
            return None
        if row is None or row.status is not Status.SUCCEEDED:
            return None
        if row.fingerprint != call.fingerprint:
            raise self._key_reused(call, row.tool, operation_info(row))
        answer = self._replayed(call, row)
        self._cache_behind(call, row)
        return answer

    async def _claim(self, call: GuardedCall, owner: str) -> Claim:
        intent = self._intent(call, owner)
        # One retry covers a pooled connection that died since its last use. Retrying a claim
        # is safe: if the first one committed, the row carries our owner token.
        try:
            try:  # `attempt`, its first try made here (see `retried`)
                return await self.ledger.claim(intent)
            except Exception as first:
                return await retried(first, lambda: self.ledger.claim(intent), _retry_claim)
        except LEDGER_ERRORS as error:
            raise self.write_not_started(error) from error

    def _intent(self, call: GuardedCall, owner: str) -> Intent:
        return Intent(
            scope=call.scope,
            key=call.key,
            tool=call.tool.name,
            fingerprint=call.fingerprint,
            arguments=call.bound.arguments_json,
            owner=owner,
            lease_seconds=self.settings.lease_seconds,
            max_executions=call.tool.max_executions,
            auth_hash=call.auth_hash,
        )

    async def _proceed(
        self, call: GuardedCall, claim: Claim, owner: str, leased_at: float
    ) -> _Answer | _Busy:
        """Decide what the row we found means for this call; `leased_at`: when (monotonic) the
        claim that may have leased it to us was sent."""
        operation = claim.operation
        action = decide_row(
            operation, created=claim.created, owner=owner, fingerprint=call.fingerprint
        )
        if action is RowAction.EXECUTE:
            if claim.created:
                return await self._first_run(call, operation, owner, leased_at)
            return await self._execute(call, operation, owner, leased_at)
        settled = self._settled(call, operation, action)
        if settled is not None:
            return settled
        if action is RowAction.CONTINUE:
            return await self._continue_failed(call, operation, owner)
        if action is RowAction.JUDGE_LEASE:
            # The ledger judges the lease on its own clock: this process's may be off.
            expired = await self.ledger.expire(operation)
            if isinstance(expired, LeaseHeld):
                return _Busy(held_for_ms(expired.seconds_left))
            if expired is None:
                return _Busy(0)
            operation = expired
        decision = await replay_gate(
            self.ledger, self.codes, call, operation, self._intent(call, owner)
        )
        if decision is None:
            return _Busy(0)
        if isinstance(decision, Resumed):
            return await self._execute(call, decision.operation, owner, decision.leased_at)
        return _Answer(decision.value, "reconciled", decision.operation)

    async def _first_run(
        self, call: GuardedCall, operation: OperationRecord, owner: str, leased_at: float
    ) -> _Answer | _Busy:
        """The first execution of a key the ledger did not know: at once, unless the ledger
        is restored and may have forgotten it (`first_run_gate`)."""
        restored = await self._restores.restored(operation.id)
        if decide_first_run(restored, has_lookup=call.tool.lookup is not None) is FirstRun.EXECUTE:
            return await self._execute(call, operation, owner, leased_at)
        assert restored is not None
        gated = await first_run_gate(
            self.ledger, self.codes, call, operation, owner, restored, leased_at
        )
        if gated is None:
            return _Busy(0)
        if isinstance(gated, Resumed):
            return await self._execute(call, gated.operation, owner, gated.leased_at)
        return _Answer(gated.value, "reconciled", gated.operation)

    def _settled(
        self, call: GuardedCall, operation: OperationRecord, action: RowAction
    ) -> _Answer | None:
        """The answer `action` gives from the row alone, without I/O: a finished operation's
        replay, or KEY_REUSED (raised); None for the actions that go on to the stores."""
        if action is RowAction.REPLAY:
            return self._replayed(call, operation)
        if action is RowAction.KEY_REUSED:
            raise self._key_reused(call, operation.tool, operation_info(operation))
        return None

    async def _continue_failed(
        self, call: GuardedCall, operation: OperationRecord, owner: str
    ) -> _Answer | _Busy:
        stored = stored_envelope(operation, self.codes)
        failed = failed_operation(operation, stored)
        now = await self.ledger.now() if waits_for_delay(failed) else operation.updated_at
        decision = decide_continuation(
            failed,
            fingerprint=call.fingerprint,
            auth_hash=call.auth_hash,
            now=now,
            codes=self.codes,
        )
        if decision is Continuation.KEY_REUSED:
            raise self._key_reused(call, operation.tool, operation_info(operation))
        if decision is Continuation.STORED_FAILURE:
            envelope = stored_failure(stored, self.codes)
            raise WriteSafeError(envelope.with_operation(operation_info(operation)))
        leased_at = time.monotonic()
        restarted = await self.ledger.restart(operation, self._intent(call, owner))
        if restarted is None:
            return _Busy(0)
        return await self._execute(call, restarted, owner, leased_at)

    async def _execute(
        self, call: GuardedCall, operation: OperationRecord, owner: str, leased_at: float
    ) -> _Answer | _Busy:
        """Run the write under its lease, retrying automatically only where no effect is proven.

        Each execution runs behind a fence of its own, from the lease write sent at `leased_at`
        (monotonic), which the lease keeper moves on with every confirmed renewal. A retryable
        failure is recorded `failed` before the wait, so a call cancelled while it waits leaves
        what it knows (the key continues later under the continuation policy); the next
        execution restarts the operation by compare-and-set, so a caller of the same key that
        continued it during the wait runs it instead, and this call answers like it.
        """
        started = time.monotonic()
        lease = self._hold_lease(call, operation, owner, leased_at)
        try:  # `attempt`, its first try made here (see `retried`)
            return await self._execute_once(call, operation, owner, lease.fence)
        except _Retryable as retryable:
            failure = retryable
        finally:
            self._leases.release(lease)  # a failed row holds no lease while the policy waits
        return await self._execute_again(call, owner, failure, started)

    async def _execute_again(
        self, call: GuardedCall, owner: str, failure: _Retryable, started: float
    ) -> _Answer | _Busy:
        """The executions after a retryable `failure`, under the tool's retry policy, whose
        time counts from `started`: the failure is the policy's attempt 1."""

        async def execution() -> _Answer | _Busy:
            nonlocal failure
            sent_at = time.monotonic()
            restarted = await self._next_execution(call, failure, owner)
            if restarted is None:
                return _Busy(0)
            lease = self._hold_lease(call, restarted, owner, sent_at)
            try:
                return await self._execute_once(call, restarted, owner, lease.fence)
            except _Retryable as retryable:
                failure = retryable
                raise
            finally:
                self._leases.release(lease)  # a failed row holds no lease while the policy waits

        def retrying() -> AsyncRetrying:
            policy = call.tool.retry_policy
            return AsyncRetrying(
                retry=retry_if_exception_type(_Retryable),
                wait=policy.wait(),
                stop=policy.stop(spent=time.monotonic() - started),
                retry_error_callback=_out_of_time,
                sleep=self.ledger.clock.sleep,
                reraise=True,
            )

        return await retried(failure, execution, retrying)

    def _hold_lease(
        self, call: GuardedCall, operation: OperationRecord, owner: str, leased_at: float
    ) -> HeldLease:
        """Keep renewing the lease of `operation`'s current execution, fenced from its lease
        write sent at `leased_at`."""
        store_token = None if self.keystore is None else lease_token(owner, call.fingerprint)
        fence = Fence(call.key, operation.executions, leased_at, self.settings.lease_seconds)
        lease = HeldLease(operation.id, owner, call.scope, call.key, store_token, fence)
        self._leases.hold(lease)
        return lease

    async def _execute_once(
        self, call: GuardedCall, operation: OperationRecord, owner: str, fence: Fence
    ) -> _Answer:
        """Run the write once under its timeout and its fence, and record what happened."""
        context = OperationContext(
            call.key, call.scope, call.tool.name, operation.executions, fence
        )
        token = set_current(context)
        try:
            try:
                fence.check()  # a stall since the claim may have cost the lease: send nothing
                with fence.running(self._run_deadlines, call.tool.timeout):
                    value = await call.invoke()
            except BaseException as error:
                classification = self._classify(call, error, fence.timed_out(), fence)
                if _leaving(error):
                    # The caller is going away: record what we know, then let it go.
                    outcome = failure_outcome(classification)
                    await asyncio.shield(self._record(call, operation, owner, outcome))
                    raise
                raise await self._failed(call, operation, owner, classification) from error
            stated = answer_failure(call.tool.adapter, value, self.codes)
            if stated is not None:  # a successful answer that says it failed
                raise await self._failed(call, operation, owner, stated)
            call.tool.retry_budget.record_success()
            try:
                encoded, value = call.tool.codec.normalise(value)
                outcome = Outcome(Status.SUCCEEDED, result=encoded)
            except ResultMisfit as misfit:
                logger.warning("result of %s/%s escalated: %s", call.scope, call.key, misfit)
                evidence = call.tool.redaction.evidence(misfit.evidence)
                outcome = misfit_outcome(misfit, evidence, self.codes)
            except ResultNotStored as unstorable:
                logger.warning("result of %s/%s not stored: %s", call.scope, call.key, unstorable)
                outcome = not_stored(str(unstorable), unstorable.evidence, self.codes)
            recorded = await self._record(call, operation, owner, outcome)
            if recorded is None:
                raise WriteSafeError(unrecorded(operation, self.codes))
            if recorded.result is None:
                raise self._stored_failure(recorded)
            return _Answer(value, "executed", recorded)
        finally:
            reset_current(token)

    async def _failed(
        self,
        call: GuardedCall,
        operation: OperationRecord,
        owner: str,
        classification: Classification,
    ) -> Exception:
        """End a failed execution as `after_failure` decides: another one, or an envelope."""
        decision = after_failure(
            classification,
            executions=operation.executions,
            max_executions=operation.max_executions,
            retry_allowed=call.tool.retry_budget.record_failure,
            policy=call.tool.retry_policy,
            codes=self.codes,
        )
        envelope = decision.envelope
        if decision.retry:
            RETRIES.labels(call.tool.name).inc()
        elif decision.throttled:
            RETRIES_THROTTLED.labels(call.tool.name).inc()
        recorded = await self._record(call, operation, owner, decision.outcome)
        if decision.retry:
            if recorded is None:
                # Fenced off, or the ledger is gone: end with the failure seen (no effect),
                # and when to come back.
                timed = call.tool.retry_policy.timed(envelope, operation.executions)
                return WriteSafeError(timed.with_operation(operation_info(operation)))
            return _Retryable(envelope, recorded)
        if recorded is None:
            return WriteSafeError(unrecorded(operation, self.codes))
        info = operation_info(recorded).model_copy(update={"throttled": decision.throttled})
        settle = call.tool.settle_after if call.tool.lookup is not None else None
        return WriteSafeError(replay_timed(envelope, settle).with_operation(info))

    async def _next_execution(
        self, call: GuardedCall, failure: _Retryable, owner: str
    ) -> OperationRecord | None:
        """Restart the failed operation for the next execution; None if another caller changed
        it during the wait (the call then answers from what the ledger holds now)."""
        try:
            return await self.ledger.restart(failure.failed, self._intent(call, owner))
        except LEDGER_ERRORS:
            # The ledger is gone: end with the failure recorded (it had no effect), and when to
            # come back.
            failed = failure.failed
            envelope = call.tool.retry_policy.timed(failure.envelope, failed.executions)
            raise WriteSafeError(envelope.with_operation(operation_info(failed))) from None

    def _record(
        self, call: GuardedCall, operation: OperationRecord, owner: str, outcome: Outcome
    ) -> Coroutine[Any, Any, OperationRecord | None]:
        """`record_outcome` for this call: its coroutine itself, not one more awaiting it."""
        retry_seconds = self.settings.record_retry_seconds
        return record_outcome(self.ledger, call.tool.name, operation, owner, outcome, retry_seconds)

    def _classify(
        self, call: GuardedCall, error: BaseException, timed_out: bool, fence: Fence
    ) -> Classification:
        lost = error if isinstance(error, LeaseLost) else None
        seen = cut_short(
            lease_lost=lost is not None,
            sent_before=lost is not None and lost.sent_before,
            fence_closed=fence.closed_the_task(),
            timed_out=timed_out,
            timeout=call.tool.timeout,
            codes=self.codes,
        )
        # Redacted here, before the ledger or the caller sees any of it.
        return seen or failure_of(call.tool.adapter, error, self.codes).redacted(
            call.tool.redaction
        )

    def _replay_cached(self, call: GuardedCall, cached: CachedOutcome) -> _Answer:
        if cached.fingerprint != call.fingerprint:
            raise self._key_reused(call, cached.tool, cached.operation_info(call.key))
        value = decoded(call, cached.result, cached.operation_info(call.key), self.codes)
        return _Answer(value, "replayed", None)

    def _key_reused(self, call: GuardedCall, tool: str, info: OperationInfo) -> WriteSafeError:
        return WriteSafeError(key_reused(call.key, tool, info, self.codes))

    async def _in_progress(self, call: GuardedCall, retry_after_ms: int | None) -> WriteSafeError:
        """IN_PROGRESS naming the operation (its key may have been derived, so the caller may
        not know it otherwise), read from the ledger where it answers."""
        row = None
        with contextlib.suppress(*LEDGER_ERRORS):
            row = await self.ledger.get(call.scope, call.key)
        envelope = in_progress(call.key, row, call.tool.max_executions, retry_after_ms, self.codes)
        return WriteSafeError(envelope)

    def write_not_started(self, error: BaseException) -> WriteSafeError:
        """The ledger failed before any write: nothing ran; `error` says whether to retry."""
        failure = ledger_failure(error)
        logger.warning("ledger failed before the write: %s (%s)", failure.cause, failure.detail)
        return WriteSafeError(write_not_started(self.codes, failure.cause))

    def _ledger_lost(
        self, call: GuardedCall, operation: OperationRecord, error: BaseException
    ) -> WriteSafeError:
        """The ledger failed while deciding about an existing operation; this call wrote nothing."""
        failure = ledger_failure(error)
        logger.warning(
            "ledger failed while deciding %s/%s: %s (%s)",
            call.scope,
            call.key,
            failure.cause,
            failure.detail,
        )
        return WriteSafeError(ledger_lost(operation, self.codes, failure.cause))

    def _stored_failure(self, operation: OperationRecord) -> WriteSafeError:
        """The envelope an operation ended with, as every later caller gets it."""
        stored = stored_envelope(operation, self.codes)
        assert stored is not None, "an operation without a result ended with an envelope"
        return WriteSafeError(stored.with_operation(operation_info(operation)))

    def _replayed(self, call: GuardedCall, operation: OperationRecord) -> _Answer:
        """A succeeded operation's answer again: its result, or the envelope it has instead."""
        if operation.result is None:
            raise self._stored_failure(operation)
        value = decoded(call, operation.result, operation_info(operation), self.codes)
        return _Answer(value, "replayed", operation)


def _count(call: GuardedCall, answer: str, started: float) -> None:
    """Count a call answered `answer`, and its time since `started` (`time.perf_counter`)."""
    calls, seconds = answered(call.tool.name, answer)
    calls.inc()
    seconds.observe(time.perf_counter() - started)


def _retry_claim() -> AsyncRetrying:
    return AsyncRetrying(
        stop=stop_after_attempt(2), retry=retry_if_exception_type(LEDGER_ERRORS), reraise=True
    )


def _out_of_time(state: RetryCallState) -> NoReturn:
    """The next wait would end past the call's time budget: end now with the recorded failure,
    saying when to come back (the key continues then, under the continuation policy)."""
    assert state.outcome is not None
    failure = state.outcome.exception()
    assert isinstance(failure, _Retryable)
    envelope = defer(failure.envelope, state.upcoming_sleep)
    raise WriteSafeError(envelope.with_operation(operation_info(failure.failed))) from failure


def _leaving(error: BaseException) -> bool:
    """True when the calling task itself is being cancelled or the process is stopping."""
    if isinstance(error, KeyboardInterrupt | SystemExit | GeneratorExit):
        return True
    task = asyncio.current_task()
    return isinstance(error, asyncio.CancelledError) and task is not None and task.cancelling() > 0
