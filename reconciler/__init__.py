"""What may happen next: the error contract, adapters, continuation policy, lookups and views.

Imports `ledger` only. Its `cli` and `service` entry packages may also import `idempotency`.
"""

from reconciler._adapters import DEFAULT_ADAPTER, Adapter, ExceptionAdapter
from reconciler._classify import Classification, classify_exception, exception_evidence
from reconciler._continuation import Continuation, FailedOperation, decide_continuation
from reconciler._contract import (
    BUILTIN_VERDICTS,
    CODES,
    MESSAGE_LIMIT,
    SCHEMA,
    Code,
    CodeRegistry,
    Disposition,
    ErrorEnvelope,
    NextAction,
    OperationInfo,
    SideEffects,
    UnknownCode,
    Verdict,
)
from reconciler._lookup import Found, LookupResult, NotFound, Unknown
from reconciler._retry import DEFAULT_RETRY_POLICY, RetryBudget, RetryPolicy, RetrySignal, wait_max
from reconciler._tool_error import ToolError
from reconciler._views import AttemptView, OperationStatus, attempts_left, operation_info

__all__ = [
    "BUILTIN_VERDICTS",
    "CODES",
    "DEFAULT_ADAPTER",
    "DEFAULT_RETRY_POLICY",
    "MESSAGE_LIMIT",
    "SCHEMA",
    "Adapter",
    "AttemptView",
    "Classification",
    "Code",
    "CodeRegistry",
    "Continuation",
    "Disposition",
    "ErrorEnvelope",
    "ExceptionAdapter",
    "FailedOperation",
    "Found",
    "LookupResult",
    "NextAction",
    "NotFound",
    "OperationInfo",
    "OperationStatus",
    "RetryBudget",
    "RetryPolicy",
    "RetrySignal",
    "SideEffects",
    "ToolError",
    "Unknown",
    "UnknownCode",
    "Verdict",
    "attempts_left",
    "classify_exception",
    "decide_continuation",
    "exception_evidence",
    "operation_info",
    "wait_max",
]
