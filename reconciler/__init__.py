"""What may happen next: the error contract, adapters, continuation policy, lookups, views, and
reconciliation (jobs and operator resolution).

Imports `ledger` only. Its `cli` and `service` entry packages may also import `idempotency`.
"""

from reconciler._absence import Absence, after_absence
from reconciler._adapters import DEFAULT_ADAPTER, Adapter, ExceptionAdapter
from reconciler._check import (
    Check,
    Lookup,
    LookupOperation,
    LookupOutcome,
    LookupSpec,
    run_lookup,
)
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
from reconciler._reconcile import ReconcilePolicy, Reconciler, ReconcileReport
from reconciler._resolve import (
    OperationNotFound,
    Resolution,
    ResolutionRefused,
    resolve_operation,
)
from reconciler._retry import DEFAULT_RETRY_POLICY, RetryBudget, RetryPolicy, RetrySignal, wait_max
from reconciler._single import ReconcilerBusy
from reconciler._tool_error import ToolError
from reconciler._views import AttemptView, OperationStatus, attempts_left, operation_info

__all__ = [
    "BUILTIN_VERDICTS",
    "CODES",
    "DEFAULT_ADAPTER",
    "DEFAULT_RETRY_POLICY",
    "MESSAGE_LIMIT",
    "SCHEMA",
    "Absence",
    "Adapter",
    "AttemptView",
    "Check",
    "Classification",
    "Code",
    "CodeRegistry",
    "Continuation",
    "Disposition",
    "ErrorEnvelope",
    "ExceptionAdapter",
    "FailedOperation",
    "Found",
    "Lookup",
    "LookupOperation",
    "LookupOutcome",
    "LookupResult",
    "LookupSpec",
    "NextAction",
    "NotFound",
    "OperationInfo",
    "OperationNotFound",
    "OperationStatus",
    "ReconcilePolicy",
    "ReconcileReport",
    "Reconciler",
    "ReconcilerBusy",
    "Resolution",
    "ResolutionRefused",
    "RetryBudget",
    "RetryPolicy",
    "RetrySignal",
    "SideEffects",
    "ToolError",
    "Unknown",
    "UnknownCode",
    "Verdict",
    "after_absence",
    "attempts_left",
    "classify_exception",
    "decide_continuation",
    "exception_evidence",
    "operation_info",
    "resolve_operation",
    "run_lookup",
    "wait_max",
]
