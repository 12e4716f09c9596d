"""writesafe: make side-effecting tools safe to call from software that retries.

    from writesafe import WriteSafe, WriteSafeError

    ws = WriteSafe()  # embedded default: a SQLite file, no servers

    @ws.tool("submit_order", timeout=5.0)
    async def submit_order(order: dict) -> dict: ...

    await submit_order({"sku": "A1"}, idempotency_key="ord-7")

This module is the public face; `__all__` is pinned by tests/test_public_api.py. Below it:
`writesafe.idempotency` (at most once), `writesafe.reconciler` (what may happen next) and
`writesafe.ledger` (what happened); beside it the entry floor, `writesafe.cli` and
`writesafe.service`, which may import all three.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from writesafe.idempotency import (
    DEFAULT_SCOPE,
    MAX_KEY_LENGTH,
    ErrorEnvelope,
    FencedTransport,
    Found,
    Invocation,
    LeaseLost,
    LookupOperation,
    NoCurrentOperation,
    NotFound,
    OperationContext,
    OperationFilter,
    OperationNotFound,
    OperationStatus,
    ReconcilerBusy,
    ReconcileReport,
    ResolutionRefused,
    Status,
    SyncFencedTransport,
    SyncTool,
    SyncWriteSafe,
    Tool,
    ToolError,
    Unknown,
    WriteSafe,
    WriteSafeError,
    WriteSafeSettings,
    configure_logging,
    current_operation,
    fenced_client,
    inject_trace_context,
    instrument_tracing,
    uninstrument_tracing,
)

if TYPE_CHECKING:
    from writesafe.idempotency._celery import idempotent_task
    from writesafe.idempotency._django import IdempotencyMiddleware, idempotent_django_view
    from writesafe.idempotency._fastapi import idempotent_route
    from writesafe.idempotency._flask import idempotent_flask_view
    from writesafe.idempotency._http import REPLAYED_HEADER
    from writesafe.idempotency._http_errors import add_problem_handlers
    from writesafe.idempotency._mcp import add_mcp_tool

# The integrations import FastAPI and the MCP SDK: loaded on first use, as in writesafe.idempotency.
_INTEGRATIONS = frozenset(
    {
        "IdempotencyMiddleware",
        "REPLAYED_HEADER",
        "add_mcp_tool",
        "add_problem_handlers",
        "idempotent_django_view",
        "idempotent_flask_view",
        "idempotent_route",
        "idempotent_task",
    }
)

__all__ = [
    "DEFAULT_SCOPE",
    "MAX_KEY_LENGTH",
    "REPLAYED_HEADER",
    "ErrorEnvelope",
    "FencedTransport",
    "Found",
    "IdempotencyMiddleware",
    "Invocation",
    "LeaseLost",
    "LookupOperation",
    "NoCurrentOperation",
    "NotFound",
    "OperationContext",
    "OperationFilter",
    "OperationNotFound",
    "OperationStatus",
    "ReconcileReport",
    "ReconcilerBusy",
    "ResolutionRefused",
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
    "add_mcp_tool",
    "add_problem_handlers",
    "configure_logging",
    "current_operation",
    "fenced_client",
    "idempotent_django_view",
    "idempotent_flask_view",
    "idempotent_route",
    "idempotent_task",
    "inject_trace_context",
    "instrument_tracing",
    "uninstrument_tracing",
]


def __getattr__(name: str) -> Any:
    if name not in _INTEGRATIONS:
        raise AttributeError(f"module 'writesafe' has no attribute {name!r}")
    return getattr(importlib.import_module("writesafe.idempotency"), name)
