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
from reconciler._mcp import from_call_tool_result, to_call_tool_result
from reconciler._problem import (
    HTTP_STATUS,
    PROBLEM_MEDIA_TYPE,
    Problem,
    from_problem,
    to_problem,
)
from reconciler._reconcile import ReconcilePolicy, Reconciler, ReconcileReport
from reconciler._resolve import (
    OperationNotFound,
    Resolution,
    ResolutionRefused,
    resolve_operation,
)
from reconciler._single import ReconcilerBusy
from reconciler._tool_error import ToolError
from reconciler._views import (
    AttemptView,
    OperationStatus,
    OperationSummary,
    attempts_left,
    operation_info,
)
from reconciler._webmcp import WEBMCP_CODES, WebMcpCode, from_webmcp, to_webmcp
from reconciler._wire import read_envelope

__all__ = [
    "BUILTIN_VERDICTS",
    "CODES",
    "DEFAULT_ADAPTER",
    "HTTP_STATUS",
    "MESSAGE_LIMIT",
    "PROBLEM_MEDIA_TYPE",
    "SCHEMA",
    "WEBMCP_CODES",
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
    "OperationSummary",
    "Problem",
    "ReconcilePolicy",
    "ReconcileReport",
    "Reconciler",
    "ReconcilerBusy",
    "Resolution",
    "ResolutionRefused",
    "SideEffects",
    "ToolError",
    "Unknown",
    "UnknownCode",
    "Verdict",
    "WebMcpCode",
    "after_absence",
    "attempts_left",
    "classify_exception",
    "decide_continuation",
    "exception_evidence",
    "from_call_tool_result",
    "from_problem",
    "from_webmcp",
    "operation_info",
    "read_envelope",
    "resolve_operation",
    "run_lookup",
    "to_call_tool_result",
    "to_problem",
    "to_webmcp",
]
