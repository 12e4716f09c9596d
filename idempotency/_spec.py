"""What the guard needs to know about a wrapped tool and about one call of it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from writesafe.idempotency._arguments import BoundCall, Parameters, declared_parameters
from writesafe.idempotency._results import ResultCodec
from writesafe.idempotency._tracing import traced_execution, traced_lookup
from writesafe.reconciler import Adapter, CodeRegistry, Lookup, Redaction, RetryPolicy
from writesafe.reconciler._check import LookupSpec
from writesafe.reconciler._redaction import DEFAULT_REDACTION
from writesafe.reconciler._retry import RetryBudget

DEFAULT_LOOKUP_TIMEOUT = 5.0


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
    lookup: Lookup | None
    settle_after: float
    passes_key: bool
    retry_policy: RetryPolicy
    retry_budget: RetryBudget
    lookup_timeout: float = DEFAULT_LOOKUP_TIMEOUT
    redaction: Redaction = DEFAULT_REDACTION
    read_only: bool = False  # no effect to protect: no key needed, nothing recorded
    # What the signature declares, worked out once for every call's `bind`.
    parameters: Parameters = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parameters = declared_parameters(self.function, self.signature)
        object.__setattr__(self, "parameters", parameters)

    def lookup_spec(self, codes: CodeRegistry) -> LookupSpec:
        """How reconciliation asks this tool's downstream system about an unknown outcome;
        `codes` judges the envelopes of the attempts the lookup is shown."""
        return LookupSpec(
            tool=self.name,
            lookup=None if self.lookup is None else traced_lookup(self.lookup),
            settle_after=self.settle_after,
            timeout=self.lookup_timeout,
            encode=self.codec.check,
            redaction=self.redaction,
            codes=codes,
        )


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
        return traced_execution(self.tool.name, self.tool.function(*self.bound.args, **kwargs))
