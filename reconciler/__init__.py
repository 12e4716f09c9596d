"""What may happen next: the error contract, adapters, continuation policy, lookups, views, and
reconciliation (jobs and operator resolution).

Imports `ledger` only. Its `cli` and `service` entry packages may also import `idempotency`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from writesafe.reconciler._absence import Absence, after_absence
from writesafe.reconciler._adapters import (
    DEFAULT_ADAPTER,
    Adapter,
    AnswerAdapter,
    answer_failure,
    failure_of,
)
from writesafe.reconciler._admission import admit, admit_stored, disagreement, stored_envelope
from writesafe.reconciler._causes import KEY_STORE, LEDGER, Lost, Unsettled, Untrusted
from writesafe.reconciler._check import (
    Check,
    Lookup,
    LookupOperation,
    LookupOutcome,
    LookupSpec,
    run_lookup,
)
from writesafe.reconciler._classify import Classification, classify_exception, exception_evidence
from writesafe.reconciler._continuation import (
    Continuation,
    FailedOperation,
    decide_continuation,
    failed_operation,
    stored_failure,
    waits_for_delay,
)
from writesafe.reconciler._contract import (
    BUILTIN_VERDICTS,
    CODES,
    FIELD_LIMIT,
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
from writesafe.reconciler._decisions import (
    FIRST_POLL_SECONDS,
    Established,
    LookupVerdict,
    Poll,
    ProvenAbsent,
    RowAction,
    StillUnknown,
    committed_earlier,
    decide_row,
    held_for_ms,
    judge_lookup,
    next_poll,
)
from writesafe.reconciler._escalation import caller_envelope, escalated
from writesafe.reconciler._failures import (
    AfterFailure,
    after_failure,
    cut_short,
    failure_outcome,
    not_stored,
)
from writesafe.reconciler._http_preset import HTTP_ADAPTER, HTTP_RULES, http_adapter
from writesafe.reconciler._lookup import Found, LookupResult, NotFound, Unknown
from writesafe.reconciler._misfit import (
    RESULT_INVALID,
    ResultMisfit,
    escalated_misfit,
    misfit_outcome,
    replay_misfit,
)
from writesafe.reconciler._problem import (
    HTTP_STATUS,
    PROBLEM_MEDIA_TYPE,
    Problem,
    ProblemBody,
    from_problem,
    to_problem,
)
from writesafe.reconciler._reconcile import ReconcilePolicy, Reconciler, ReconcileReport
from writesafe.reconciler._redaction import (
    DEFAULT_REDACTION,
    REDACTED,
    Redaction,
    Redactor,
    redact_text,
)
from writesafe.reconciler._refusals import (
    in_progress,
    key_reused,
    ledger_lost,
    unrecorded,
    write_not_started,
)
from writesafe.reconciler._resolve import (
    RESOLVABLE,
    EvidenceRequired,
    OperationNotFound,
    Resolution,
    ResolutionRefused,
    resolve_operation,
)
from writesafe.reconciler._response import DownstreamError, RawResponse, response_of
from writesafe.reconciler._retention_bound import retention_refusal
from writesafe.reconciler._retry import (
    DEFAULT_MAX_ELAPSED,
    DEFAULT_RETRY_POLICY,
    RetryBudget,
    RetryPolicy,
    RetrySignal,
    defer,
    exhausted,
    replay_timed,
    wait_max,
)
from writesafe.reconciler._retry_after import MAX_RETRY_AFTER_MS, parse_retry_after
from writesafe.reconciler._rules import NOT_JSON, ResponseAdapter, Rule
from writesafe.reconciler._schema import envelope_json_schema
from writesafe.reconciler._single import ReconcilerBusy
from writesafe.reconciler._tool_error import ToolError
from writesafe.reconciler._views import (
    AttemptView,
    OperationStatus,
    OperationSummary,
    attempts_left,
    operation_info,
)
from writesafe.reconciler._webmcp import (
    WEBMCP_CODES,
    WebMcpCode,
    from_webmcp,
    from_webmcp_text,
    to_webmcp,
    to_webmcp_text,
)
from writesafe.reconciler._wire import read_envelope

if TYPE_CHECKING:
    from writesafe.reconciler._mcp import from_call_tool_result, to_call_tool_result

# The MCP renderings import `mcp_types`, whose pydantic models take about half a second to build:
# every process that imports writesafe (each worker, each CLI run) would pay it, most never use it.
_ON_FIRST_USE = {
    "from_call_tool_result": "writesafe.reconciler._mcp",
    "to_call_tool_result": "writesafe.reconciler._mcp",
}

__all__ = [
    "BUILTIN_VERDICTS",
    "CODES",
    "DEFAULT_ADAPTER",
    "DEFAULT_MAX_ELAPSED",
    "DEFAULT_REDACTION",
    "DEFAULT_RETRY_POLICY",
    "FIELD_LIMIT",
    "FIRST_POLL_SECONDS",
    "HTTP_ADAPTER",
    "HTTP_RULES",
    "HTTP_STATUS",
    "KEY_STORE",
    "LEDGER",
    "MAX_RETRY_AFTER_MS",
    "MESSAGE_LIMIT",
    "NOT_JSON",
    "PROBLEM_MEDIA_TYPE",
    "REDACTED",
    "RESOLVABLE",
    "RESULT_INVALID",
    "SCHEMA",
    "WEBMCP_CODES",
    "Absence",
    "Adapter",
    "AfterFailure",
    "AnswerAdapter",
    "AttemptView",
    "Check",
    "Classification",
    "Code",
    "CodeRegistry",
    "Continuation",
    "Disposition",
    "DownstreamError",
    "ErrorEnvelope",
    "Established",
    "EvidenceRequired",
    "FailedOperation",
    "Found",
    "Lookup",
    "LookupOperation",
    "LookupOutcome",
    "LookupResult",
    "LookupSpec",
    "LookupVerdict",
    "Lost",
    "NextAction",
    "NotFound",
    "OperationInfo",
    "OperationNotFound",
    "OperationStatus",
    "OperationSummary",
    "Poll",
    "Problem",
    "ProblemBody",
    "ProvenAbsent",
    "RawResponse",
    "ReconcilePolicy",
    "ReconcileReport",
    "Reconciler",
    "ReconcilerBusy",
    "Redaction",
    "Redactor",
    "Resolution",
    "ResolutionRefused",
    "ResponseAdapter",
    "ResultMisfit",
    "RetryBudget",
    "RetryPolicy",
    "RetrySignal",
    "RowAction",
    "Rule",
    "SideEffects",
    "StillUnknown",
    "ToolError",
    "Unknown",
    "UnknownCode",
    "Unsettled",
    "Untrusted",
    "Verdict",
    "WebMcpCode",
    "admit",
    "admit_stored",
    "after_absence",
    "after_failure",
    "answer_failure",
    "attempts_left",
    "caller_envelope",
    "classify_exception",
    "committed_earlier",
    "cut_short",
    "decide_continuation",
    "decide_row",
    "defer",
    "disagreement",
    "envelope_json_schema",
    "escalated",
    "escalated_misfit",
    "exception_evidence",
    "exhausted",
    "failed_operation",
    "failure_of",
    "failure_outcome",
    "from_call_tool_result",
    "from_problem",
    "from_webmcp",
    "from_webmcp_text",
    "held_for_ms",
    "http_adapter",
    "in_progress",
    "judge_lookup",
    "key_reused",
    "ledger_lost",
    "misfit_outcome",
    "next_poll",
    "not_stored",
    "operation_info",
    "parse_retry_after",
    "read_envelope",
    "redact_text",
    "replay_misfit",
    "replay_timed",
    "resolve_operation",
    "response_of",
    "retention_refusal",
    "run_lookup",
    "stored_envelope",
    "stored_failure",
    "to_call_tool_result",
    "to_problem",
    "to_webmcp",
    "to_webmcp_text",
    "unrecorded",
    "wait_max",
    "waits_for_delay",
    "write_not_started",
]


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
