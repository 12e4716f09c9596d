"""Tenacity for the steps that fail, not for the ones that work.

Building a tenacity controller and its per-attempt bookkeeping cost tens of microseconds, and a
guarded call has three retried steps (claim, execution, outcome) that nearly always succeed at
once. So the first try runs bare, and only a failure builds the controller and enters it as its
attempt 1: the retry and wait strategies see exactly what they would have seen (a stop after a
delay counts from the first failure). The claim, the execution and the outcome make their first
try themselves and call `retried` on a failure: `attempt`'s coroutine and the step's closure are
objects the collector tracks, held by every call in flight (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying

T = TypeVar("T")


async def attempt(step: Callable[[], Awaitable[T]], retrying: Callable[[], AsyncRetrying]) -> T:
    """`await retrying()(step)`, with the first try outside tenacity."""
    try:
        return await step()
    except Exception as error:
        return await retried(error, step, retrying)


async def retried(
    first_failure: Exception,
    step: Callable[[], Awaitable[T]],
    retrying: Callable[[], AsyncRetrying],
) -> T:
    """`await retrying()(step)` for a step whose first try, made outside tenacity, raised
    `first_failure`: it is tenacity's attempt 1, and `step` makes the tries after it."""
    failure: Exception | None = first_failure

    async def step_after_first_failure() -> T:
        nonlocal failure
        if failure is not None:
            raised, failure = failure, None
            raise raised
        return await step()

    result: T = await retrying()(step_after_first_failure)
    return result
