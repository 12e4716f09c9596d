"""The retry policy's time budget, as values: when a call stops instead of waiting, and the
retry_after it then answers with."""

from __future__ import annotations

import pytest
from tenacity import RetryCallState

from writesafe.reconciler import CODES, Code, RetryPolicy
from writesafe.reconciler._retry import defer


def state(since_start: float, upcoming_sleep: float) -> RetryCallState:
    """A retry controller's state `since_start` seconds after it started, about to sleep."""
    retry_state = RetryCallState(None, None, (), {})
    retry_state.start_time = 100.0
    retry_state.outcome_timestamp = 100.0 + since_start
    retry_state.upcoming_sleep = upcoming_sleep
    return retry_state


@pytest.mark.parametrize(
    ("max_elapsed", "spent", "since_start", "sleep", "stops"),
    [
        (10.0, 0.0, 0.0, 0.1, False),  # a short backoff well inside the budget
        (10.0, 0.0, 0.0, 600.0, True),  # a ten-minute Retry-After is never slept
        (10.0, 0.0, 9.0, 0.9, False),  # ends just inside the budget
        (10.0, 0.0, 9.0, 1.0, True),  # would end exactly at it
        (10.0, 4.0, 5.0, 0.9, False),  # the first execution's 4 s count too...
        (10.0, 4.0, 5.0, 1.5, True),  # ...so the same wait no longer fits
        (10.0, 12.0, 0.0, 0.0, True),  # a first execution past the budget: no retry at all
        (0.5, 0.0, 0.0, 1.0, True),  # a tool's own tighter budget
    ],
)
def test_the_time_budget_stops_before_a_wait_that_would_end_past_it(
    max_elapsed: float, spent: float, since_start: float, sleep: float, stops: bool
) -> None:
    stop = RetryPolicy(max_elapsed=max_elapsed).stop(spent=spent)
    assert stop(state(since_start, sleep)) is stops


@pytest.mark.parametrize(
    ("stated_ms", "wait_seconds", "retry_after_ms"),
    [
        (None, 0.25, 250),  # no stated delay: the backoff it skipped
        (600_000, 600.0, 600_000),  # the dependency's delay, as it stated it
        (1_000, 3.2, 3_200),  # a longer backoff than stated: the longer one
        (5_000, 0.1, 5_000),  # never sooner than the dependency asked
        (None, 0.0001, 1),  # a fraction of a millisecond rounds up
    ],
)
def test_a_deferred_call_says_when_to_come_back(
    stated_ms: int | None, wait_seconds: float, retry_after_ms: int
) -> None:
    failure = CODES.envelope(Code.RATE_LIMITED, "slow down", retry_after_ms=stated_ms)
    deferred = defer(failure, wait_seconds)
    assert deferred.retry_after_ms == retry_after_ms
    assert deferred.model_copy(update={"retry_after_ms": stated_ms}) == failure


@pytest.mark.parametrize("field", ["initial", "maximum", "max_elapsed"])
def test_a_policy_needs_positive_bounds(field: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        RetryPolicy(**{field: 0})
