"""Read-only tools: retried like writes where that is safe, recorded nowhere.

A read (a lookup, a status query) has no effect to protect, so it needs no key, no lease and no
ledger row: it pays no write path. What it keeps is the contract: failures are envelopes through
the same adapter and door, and only retryable no-effect failures are retried automatically,
honouring the stated delay, within the tool's `max_executions` and its dependency's retry budget.
"""

from __future__ import annotations

import math
import time
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

from writesafe.idempotency._attempts import attempt
from writesafe.idempotency._context import OperationContext, reset_current, set_current
from writesafe.idempotency._errors import WriteSafeError
from writesafe.idempotency._fence import Fence
from writesafe.idempotency._spec import GuardedCall
from writesafe.ledger import Clock
from writesafe.ledger._task_deadlines import TaskDeadlines
from writesafe.reconciler import Classification, Code, CodeRegistry, Lost, SideEffects
from writesafe.reconciler._adapters import answer_failure, failure_of
from writesafe.reconciler._retry import RetrySignal, exhausted


async def run_read(
    call: GuardedCall, codes: CodeRegistry, clock: Clock, deadlines: TaskDeadlines
) -> Any:
    """The read's answer, or `WriteSafeError` with the envelope it ended on; `deadlines`: the
    loop's, which end a read that outlives the tool's timeout."""
    tool = call.tool
    executions = 0

    async def execution() -> Any:
        nonlocal executions
        executions += 1
        classification = await _read_once(call, codes, executions, deadlines)
        if isinstance(classification, Classification):
            raise _failed(call, classification, executions, codes)
        tool.retry_budget.record_success()
        return classification.value

    def retrying() -> AsyncRetrying:
        return AsyncRetrying(
            retry=retry_if_exception_type(RetrySignal),
            stop=stop_after_attempt(tool.max_executions),
            wait=tool.retry_policy.wait(),
            sleep=clock.sleep,
            reraise=True,
        )

    try:
        return await attempt(execution, retrying)
    except RetrySignal as stopped:  # the last execution was retryable: the budget is spent
        raise WriteSafeError(exhausted(stopped.envelope, executions, codes)) from None


class _Value:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


async def _read_once(
    call: GuardedCall, codes: CodeRegistry, execution: int, deadlines: TaskDeadlines
) -> _Value | Classification:
    # A read holds no lease, so its fence never closes: nothing it sends can be stale.
    fence = Fence(call.key, execution, time.monotonic(), math.inf)
    token = set_current(OperationContext(call.key, call.scope, call.tool.name, execution, fence))
    try:
        try:
            with fence.running(deadlines, call.tool.timeout):
                value = await call.invoke()
        except Exception as error:
            if fence.timed_out():
                message = f"the read did not finish within {call.tool.timeout}s"
                envelope = codes.envelope(Code.OUTCOME_UNKNOWN, message, cause=Lost.TIMEOUT)
                return Classification(envelope, {"timeout_seconds": call.tool.timeout})
            return failure_of(call.tool.adapter, error, codes)
        stated = answer_failure(call.tool.adapter, value, codes)
        return _Value(value) if stated is None else stated
    finally:
        reset_current(token)


def _failed(
    call: GuardedCall, classification: Classification, executions: int, codes: CodeRegistry
) -> Exception:
    envelope = classification.envelope
    retryable = envelope.retryable and envelope.side_effects is SideEffects.NONE
    if not retryable:
        return WriteSafeError(envelope)
    if executions >= call.tool.max_executions:
        return WriteSafeError(exhausted(envelope, executions, codes))
    if not call.tool.retry_budget.record_failure():
        return WriteSafeError(call.tool.retry_policy.timed(envelope, executions))
    return RetrySignal(envelope)
