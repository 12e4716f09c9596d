"""Automatic retry inside one call, as values: when to retry, and whether a dependency can bear it.

The guard retries only failures that prove no effect and say they are retryable; these values
decide *when* (max of the dependency's Retry-After and capped full-jitter backoff, via tenacity
wait strategies), *whether the call still has time for it* (a tenacity stop before a wait that
would end past the call's time budget) and *whether the dependency can afford it* (a gRPC-style
retry token bucket).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from tenacity import RetryCallState, stop_before_delay, wait_exception, wait_random_exponential
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from writesafe.reconciler._contract import Code, CodeRegistry, ErrorEnvelope, NextAction


class RetrySignal(Exception):
    """Raised inside the guard's retry loop to ask for another execution after `envelope`."""

    def __init__(self, envelope: ErrorEnvelope) -> None:
        super().__init__(envelope.code)
        self.envelope = envelope


class wait_max(wait_base):  # noqa: N801 - named like tenacity's own strategies
    """Wait as long as the longest of several strategies."""

    def __init__(self, *strategies: wait_base) -> None:
        self.strategies = strategies

    def __call__(self, retry_state: RetryCallState) -> float:
        return max(float(strategy(retry_state)) for strategy in self.strategies)


def _stated_delay(error: BaseException) -> float:
    if isinstance(error, RetrySignal) and error.envelope.retry_after_ms is not None:
        return error.envelope.retry_after_ms / 1000
    return 0.0


DEFAULT_MAX_ELAPSED = 10.0
"""Seconds one call may spend on a write and its automatic retries before it stops waiting."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff between automatic retries: max(Retry-After, full-jitter exponential backoff),
    within the call's time budget.

    `initial` and `maximum` bound the backoff (seconds); the dependency's stated delay is honoured
    as given by the adapter (which clamps it). `max_elapsed` bounds a call's time: a wait that
    would end later than `max_elapsed` seconds after the call's first execution began is not
    slept; the call ends with the retryable failure instead, saying when to come back (`defer`).
    """

    initial: float = 0.1
    maximum: float = 5.0
    max_elapsed: float = DEFAULT_MAX_ELAPSED

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.maximum <= 0 or self.max_elapsed <= 0:
            raise ValueError("initial, maximum and max_elapsed must be positive")

    def wait(self) -> wait_base:
        backoff = wait_random_exponential(multiplier=self.initial, max=self.maximum)
        return wait_max(wait_exception(_stated_delay), backoff)

    def stop(self, spent: float) -> stop_base:
        """Stop before a wait past the budget, for a controller started `spent` seconds into it
        (the guard's first execution runs before its retry controller exists)."""
        return stop_before_delay(self.max_elapsed - spent)

    def timed(self, envelope: ErrorEnvelope, executions: int) -> ErrorEnvelope:
        """`envelope`, with this policy's backoff after `executions` as its delay where it is
        retryable and states none: a caller handed a retryable failure must learn when."""
        if not envelope.retryable or envelope.retry_after_ms is not None:
            return envelope
        seconds = min(self.maximum, self.initial * 2 ** max(executions, 0))
        return envelope.model_copy(update={"retry_after_ms": math.ceil(seconds * 1000)})


def defer(envelope: ErrorEnvelope, wait_seconds: float) -> ErrorEnvelope:
    """The retryable failure a call ends with instead of waiting `wait_seconds`: come back no
    sooner than the wait would have ended (and never sooner than the dependency asked)."""
    wait_ms = max(envelope.retry_after_ms or 0, math.ceil(wait_seconds * 1000))
    return envelope.model_copy(update={"retry_after_ms": wait_ms})


@dataclass(slots=True)
class RetryBudget:
    """A per-dependency retry token bucket (gRPC retryThrottling semantics).

    Each retryable failure costs a token, each success earns `token_ratio`; retries are allowed
    only while more than half the bucket is left, so a degraded dependency sees retries dry up
    instead of multiplying its load. Process-local, like gRPC's and the AWS SDKs' quotas.
    """

    max_tokens: float = 10.0
    token_ratio: float = 0.1
    tokens: float = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.max_tokens <= 0 or self.token_ratio < 0:
            raise ValueError("max_tokens must be positive and token_ratio non-negative")
        self.tokens = self.max_tokens

    def record_success(self) -> None:
        with self._lock:
            self.tokens = min(self.max_tokens, self.tokens + self.token_ratio)

    def record_failure(self) -> bool:
        """Spend a token for a retryable failure; True if a retry is still allowed."""
        with self._lock:
            self.tokens = max(0.0, self.tokens - 1)
            return self.tokens > self.max_tokens / 2


def replay_timed(envelope: ErrorEnvelope, settle_seconds: float | None) -> ErrorEnvelope:
    """`envelope`, with the settle window as its delay where it asks for reconciliation and
    states none: a lookup cannot prove absence sooner, so coming back earlier gains nothing.
    `settle_seconds` is None for a tool without a lookup: no wait would change its answer."""
    if (
        settle_seconds is None
        or envelope.next_action is not NextAction.RECONCILE
        or envelope.retry_after_ms is not None
    ):
        return envelope
    return envelope.model_copy(update={"retry_after_ms": math.ceil(settle_seconds * 1000)})


def exhausted(last: ErrorEnvelope, executions: int, codes: CodeRegistry) -> ErrorEnvelope:
    """RETRY_EXHAUSTED after `executions`, whose last answer was `last` (named as its cause)."""
    return codes.envelope(
        Code.RETRY_EXHAUSTED,
        f"gave up after {executions} executions; the last answer was {last.code}: {last.message}",
        cause=last.code,
    )


DEFAULT_RETRY_POLICY = RetryPolicy()
