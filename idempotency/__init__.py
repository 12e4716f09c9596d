"""At most once: keys, fingerprints, the Redis key store, and the `WriteSafe` guard and decorator.

from idempotency import WriteSafe, WriteSafeError

ws = WriteSafe()

@ws.tool("submit_order", timeout=5.0)
async def submit_order(order: dict) -> dict: ...

await submit_order({"sku": "A1"}, idempotency_key="ord-7")
"""

from idempotency._context import OperationContext, current_operation
from idempotency._errors import WriteSafeError
from idempotency._keys import DEFAULT_SCOPE, MAX_KEY_LENGTH
from idempotency._settings import WriteSafeSettings
from idempotency._tool import Tool
from idempotency._writesafe import WriteSafe
from ledger import Status
from reconciler import (
    ErrorEnvelope,
    Found,
    LookupOperation,
    NotFound,
    OperationNotFound,
    OperationStatus,
    ReconcilerBusy,
    ReconcileReport,
    ResolutionRefused,
    ToolError,
    Unknown,
)

__all__ = [
    "DEFAULT_SCOPE",
    "MAX_KEY_LENGTH",
    "ErrorEnvelope",
    "Found",
    "LookupOperation",
    "NotFound",
    "OperationContext",
    "OperationNotFound",
    "OperationStatus",
    "ReconcileReport",
    "ReconcilerBusy",
    "ResolutionRefused",
    "Status",
    "Tool",
    "ToolError",
    "Unknown",
    "WriteSafe",
    "WriteSafeError",
    "WriteSafeSettings",
    "current_operation",
]
