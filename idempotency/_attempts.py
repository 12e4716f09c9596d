"""Tenacity for the steps that fail, not for the ones that work.

Building a tenacity controller and its per-attempt bookkeeping cost tens of microseconds, and a
guarded call has three retried steps (claim, execution, outcome) that nearly always succeed at
once. So the first try runs bare, and only a failure builds the controller and enters it as its
attempt 1: the retry and wait strategies see exactly what they would have seen (a stop after a
delay counts from the first failure).
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
        first_failure: Exception | None = error

    async def step_after_first_failure() -> T:
        nonlocal first_failure
        if first_failure is not None:
            failure, first_failure = first_failure, None
            raise failure
        return await step()

    result: T = await retrying()(step_after_first_failure)
    return result
