"""What the guard needs to know about a wrapped tool and about one call of it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from idempotency._arguments import BoundCall
from idempotency._results import ResultCodec
from reconciler import Adapter, RetryBudget, RetryPolicy


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A registered tool: the write, how to classify its failures, and its bounds."""

    name: str
    function: Callable[..., Awaitable[Any]]
    signature: inspect.Signature
    adapter: Adapter
    codec: ResultCodec
    timeout: float | None
    max_executions: int
    wait_timeout: float
    key_function: Callable[..., object] | None
    lookup: Callable[..., Awaitable[Any]] | None
    settle_after: float
    passes_key: bool
    retry_policy: RetryPolicy
    retry_budget: RetryBudget


@dataclass(frozen=True, slots=True)
class GuardedCall:
    """One call of a tool, validated and fingerprinted."""

    tool: ToolSpec
    scope: str
    key: str
    bound: BoundCall
    fingerprint: str
    auth_hash: str | None

    def invoke(self) -> Awaitable[Any]:
        kwargs = dict(self.bound.kwargs)
        if self.tool.passes_key:
            kwargs["idempotency_key"] = self.key
        return self.tool.function(*self.bound.args, **kwargs)
