"""What may happen next: the error contract, adapters, lookups, retry policy, renderings, views
and reconciliation.

This face is what users and the docs need: the contract's types (`ErrorEnvelope`, `Code`,
`CodeRegistry`), what a tool raises or a lookup answers (`ToolError`, `Found`, `NotFound`,
`Unknown`), adapters (`Rule`, `http_adapter`, `ResponseAdapter`), `RetryPolicy`, redaction, the
renderings (problem+json, MCP, WebMCP) and the views of an operation. The guard's decisions
(`next_poll`, `write_not_started`, ...) stay in the private modules, which the guard and the
entry floor import directly; `writesafe.reconciler.conformance` is the contract check's face.

Imports `ledger` only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from writesafe.reconciler._adapters import DEFAULT_ADAPTER, Adapter, AnswerAdapter
from writesafe.reconciler._causes import Lost, Unsettled, Untrusted
from writesafe.reconciler._check import Lookup, LookupOperation
from writesafe.reconciler._classify import Classification
from writesafe.reconciler._contract import (
    CODES,
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
from writesafe.reconciler._http_preset import HTTP_ADAPTER, http_adapter
from writesafe.reconciler._ledger_causes import ledger_failure
from writesafe.reconciler._lookup import Found, LookupResult, NotFound, Unknown
from writesafe.reconciler._problem import PROBLEM_MEDIA_TYPE, Problem, from_problem, to_problem
from writesafe.reconciler._reconcile import ReconcileReport
from writesafe.reconciler._redaction import REDACTED, Redaction, Redactor
from writesafe.reconciler._resolve import EvidenceRequired, OperationNotFound, ResolutionRefused
from writesafe.reconciler._response import DownstreamError, RawResponse
from writesafe.reconciler._retry import DEFAULT_RETRY_POLICY, RetryPolicy
from writesafe.reconciler._rules import ResponseAdapter, Rule
from writesafe.reconciler._single import ReconcilerBusy
from writesafe.reconciler._tool_error import ToolError
from writesafe.reconciler._views import AttemptView, OperationStatus, OperationSummary
from writesafe.reconciler._webmcp import (
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
    "CODES",
    "DEFAULT_ADAPTER",
    "DEFAULT_RETRY_POLICY",
    "HTTP_ADAPTER",
    "PROBLEM_MEDIA_TYPE",
    "REDACTED",
    "Adapter",
    "AnswerAdapter",
    "AttemptView",
    "Classification",
    "Code",
    "CodeRegistry",
    "Disposition",
    "DownstreamError",
    "ErrorEnvelope",
    "EvidenceRequired",
    "Found",
    "Lookup",
    "LookupOperation",
    "LookupResult",
    "Lost",
    "NextAction",
    "NotFound",
    "OperationInfo",
    "OperationNotFound",
    "OperationStatus",
    "OperationSummary",
    "Problem",
    "RawResponse",
    "ReconcileReport",
    "ReconcilerBusy",
    "Redaction",
    "Redactor",
    "ResolutionRefused",
    "ResponseAdapter",
    "RetryPolicy",
    "Rule",
    "SideEffects",
    "ToolError",
    "Unknown",
    "UnknownCode",
    "Unsettled",
    "Untrusted",
    "Verdict",
    "WebMcpCode",
    "from_call_tool_result",
    "from_problem",
    "from_webmcp",
    "from_webmcp_text",
    "http_adapter",
    "ledger_failure",
    "read_envelope",
    "to_call_tool_result",
    "to_problem",
    "to_webmcp",
    "to_webmcp_text",
]


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
