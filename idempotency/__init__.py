"""At most once: keys, fingerprints, the Redis key store, and the `WriteSafe` guard and decorator.

from writesafe import WriteSafe, WriteSafeError

ws = WriteSafe()

@ws.tool("submit_order", timeout=5.0)
async def submit_order(order: dict) -> dict: ...

await submit_order({"sku": "A1"}, idempotency_key="ord-7")

A plain `def` becomes a blocking `SyncTool` with the same guarantees; `ws.sync` is the blocking
face of `status`, `reconcile` and `resolve`.

The types `WriteSafe(...)` and `ws.tool(...)` take are here too: `Adapter`, `Lookup` (and the
`LookupResult` it answers), `RetryPolicy`, `CodeRegistry`, `Redactor`, `Clock`; `Code` names the
codes a `ToolError` raises. `FencedTransport` (or `fenced_client()`) fences every httpx request a
guarded write sends and forwards its key and fencing token. The framework integrations (FastAPI,
Flask, Django, Celery, MCP) live in `writesafe.contrib`, each with its extra.
"""

from __future__ import annotations

from writesafe.idempotency._context import (
    NoCurrentOperation,
    OperationContext,
    current_operation,
)
from writesafe.idempotency._errors import WriteSafeError
from writesafe.idempotency._fence import LeaseLost
from writesafe.idempotency._httpx import FencedTransport, SyncFencedTransport, fenced_client
from writesafe.idempotency._keys import DEFAULT_SCOPE, MAX_KEY_LENGTH
from writesafe.idempotency._logging import OperationFilter, configure_logging
from writesafe.idempotency._settings import SettingsRefused, WriteSafeSettings
from writesafe.idempotency._sync import SyncTool, SyncWriteSafe
from writesafe.idempotency._tool import Invocation, Tool
from writesafe.idempotency._tracing import (
    inject_trace_context,
    instrument_tracing,
    uninstrument_tracing,
)
from writesafe.idempotency._writesafe import WriteSafe
from writesafe.ledger import Clock, Status
from writesafe.reconciler import (
    Adapter,
    Code,
    CodeRegistry,
    ErrorEnvelope,
    Found,
    Lookup,
    LookupOperation,
    LookupResult,
    NotFound,
    OperationNotFound,
    OperationStatus,
    ReconcilerBusy,
    ReconcileReport,
    Redactor,
    ResolutionRefused,
    RetryPolicy,
    ToolError,
    Unknown,
)

__all__ = [
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
]
