"""A typed failure a wrapped tool raises itself when it already knows what went wrong."""

from __future__ import annotations

from typing import Any


class ToolError(Exception):
    """Raise inside a tool to report a contract code directly (adapters map it to an envelope).

    `evidence` is kept as the attempt's raw evidence (bounded when stored).
    """

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        field: str | None = None,
        retry_after_ms: int | None = None,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message or code
        self.field = field
        self.retry_after_ms = retry_after_ms
        self.evidence = evidence or {}
