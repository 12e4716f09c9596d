"""The public faces: each package's `__all__` is pinned, every name in it resolves, nothing leaks.

Like httpx's `test_exported_members`: adding or removing a public name is a deliberate change of
these lists, never a side effect of an import. A face exports what the docs use; what the guard
and the entry floor need besides lives in the private modules they import directly.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import ModuleType

import pytest

import writesafe

FACES: dict[str, list[str]] = {
    "writesafe": [
        "DEFAULT_SCOPE",
        "MAX_KEY_LENGTH",
        "Adapter",
        "Clock",
        "Code",
        "CodeRegistry",
        "ErrorEnvelope",
        "FencedTransport",
        "Found",
        "Invocation",
        "LeaseLost",
        "Lookup",
        "LookupOperation",
        "LookupResult",
        "NoCurrentOperation",
        "NotFound",
        "OperationContext",
        "OperationFilter",
        "OperationNotFound",
        "OperationStatus",
        "ReconcileReport",
        "ReconcilerBusy",
        "Redactor",
        "ResolutionRefused",
        "RetryPolicy",
        "SettingsRefused",
        "Status",
        "SyncFencedTransport",
        "SyncTool",
        "SyncWriteSafe",
        "Tool",
        "ToolError",
        "Unknown",
        "WriteSafe",
        "WriteSafeError",
        "WriteSafeSettings",
        "configure_logging",
        "current_operation",
        "fenced_client",
        "inject_trace_context",
        "instrument_tracing",
        "uninstrument_tracing",
    ],
    "writesafe.reconciler": [
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
    ],
    "writesafe.reconciler.conformance": [
        "CaseFile",
        "Observed",
        "PairReport",
        "PairRun",
        "Report",
        "ScenarioRunner",
        "conformance_vectors",
        "envelope_json_schema",
        "evaluate",
    ],
    "writesafe.ledger": [
        "DEFAULT_BATCH_SIZE",
        "DEFAULT_DATABASE_URL",
        "FINAL_STATES",
        "LATE_SEND",
        "LEASE_EXPIRED",
        "RESTORED_KEY",
        "TRANSITIONS",
        "ApiKey",
        "ApiKeyRecord",
        "ApiKeys",
        "Attempt",
        "AttemptKind",
        "AttemptRecord",
        "Base",
        "Claim",
        "Clock",
        "DueBatch",
        "FileMark",
        "IllegalTransition",
        "Intent",
        "LeaseHeld",
        "Ledger",
        "LedgerNotMigrated",
        "LedgerState",
        "Level",
        "ManualClock",
        "Mark",
        "Operation",
        "OperationRecord",
        "Outcome",
        "PruneReport",
        "Restored",
        "Role",
        "Settlement",
        "Signal",
        "Status",
        "StoreTime",
        "SystemClock",
        "UnsupportedDatabase",
        "canonical_json",
        "check_restored",
        "check_transition",
        "clear_restored",
        "create_engine",
        "current_revision",
        "declare_restored",
        "downgrade",
        "dumps_json",
        "expired_at",
        "head_revision",
        "loads_json",
        "mark_path",
        "prune",
        "restored_state",
        "revisions",
    ],
    "writesafe.service": [
        "MAX_TOKEN_LENGTH",
        "VERSION",
        "EnvelopeProblem",
        "Principal",
        "ProblemDetails",
        "ServiceSettings",
        "create_api_key",
        "create_app",
        "hash_token",
        "render_markdown",
    ],
    "writesafe.contrib.fastapi": [
        "REPLAYED_HEADER",
        "add_problem_handlers",
        "idempotent_route",
    ],
    "writesafe.contrib.flask": [
        "REPLAYED_HEADER",
        "idempotent_flask_view",
    ],
    "writesafe.contrib.django": [
        "REPLAYED_HEADER",
        "IdempotencyMiddleware",
        "idempotent_django_view",
    ],
    "writesafe.contrib.celery": [
        "idempotent_task",
    ],
    "writesafe.contrib.mcp": [
        "add_mcp_tool",
    ],
}
FACES["writesafe.idempotency"] = FACES["writesafe"]  # the top level is the guard's face


@pytest.mark.parametrize("face", sorted(FACES))
def test_exported_members(face: str) -> None:
    module = importlib.import_module(face)
    assert module.__all__ == FACES[face]
    for name in FACES[face]:
        assert getattr(module, name) is not None, name


def test_the_top_level_carries_the_types_ws_tool_takes() -> None:
    """What `WriteSafe(...)` and `ws.tool(...)` are given is importable from the top level."""
    taken = {
        "Adapter",
        "Clock",
        "CodeRegistry",
        "Lookup",
        "LookupResult",
        "Redactor",
        "RetryPolicy",
    }
    assert taken - set(writesafe.__all__) == set()


def test_the_reconciler_face_leaves_the_guards_decisions_out() -> None:
    import writesafe.reconciler as reconciler

    internal = {"write_not_started", "ledger_lost", "unrecorded", "next_poll", "decide_row"}
    assert internal & set(dir(reconciler)) == set()


def test_nothing_public_is_left_out_of_all() -> None:
    defined_here = {
        name
        for name, value in vars(writesafe).items()
        if not name.startswith("_")
        and not isinstance(value, ModuleType)
        and str(getattr(value, "__module__", "")).startswith("writesafe")
    }
    assert defined_here - set(FACES["writesafe"]) == set()


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from writesafe import *", namespace)
    assert sorted(set(namespace) - {"__builtins__"}) == sorted(FACES["writesafe"])


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(ImportError, match="no_such_name"):
        exec("from writesafe import no_such_name", {})


def test_the_integrations_load_on_first_use() -> None:
    # Nor do redis-py (only with a Redis URL) and the MCP wire types (only for MCP renderings):
    # each takes about half a second, in every worker and CLI process.
    code = (
        "import sys, writesafe; "
        "loaded = {'fastapi', 'mcp', 'mcp_types', 'redis'} & set(sys.modules); "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
