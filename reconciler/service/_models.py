"""Request and response bodies of the service that are not the library's own views."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ledger import canonical_json
from reconciler import AttemptView, OperationSummary

REASON_LIMIT = 2_000


class OperationPage(BaseModel):
    """One page of a listing, oldest change first."""

    items: list[OperationSummary]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to get the next page; null on the last page."
    )


class AttemptList(BaseModel):
    """Every audited attempt of one operation: executions, lookups and operator acts."""

    key: str
    items: list[AttemptView]


class ResolveRequest(BaseModel):
    """An operator's verdict on an operation that reconciliation could not decide."""

    model_config = ConfigDict(extra="forbid")

    outcome: Literal["succeeded", "failed"]
    reason: str = Field(
        min_length=1,
        max_length=REASON_LIMIT,
        pattern=r"^[^\x00]+$",
        description="Why, with the evidence checked (kept in the audit record; no NUL).",
    )
    result: Any = Field(
        default=None, description="The operation's result when `outcome` is succeeded (any JSON)."
    )

    @field_validator("reason")
    @classmethod
    def _storable_reason(cls, value: str) -> str:
        _require_utf8(value)
        return value

    @field_validator("result")
    @classmethod
    def _storable_result(cls, value: Any) -> Any:
        try:
            _require_utf8(canonical_json(value))
        except RecursionError as error:
            raise ValueError("the result is nested too deeply") from error
        return value


class ReconcileRequest(BaseModel):
    """Bounds of one reconciliation pass."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=100, ge=1, le=1_000, description="Operations examined at most.")


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready"] = "ready"
    checks: dict[str, str] = Field(description="Each store and how it answered.")


def _require_utf8(text: str) -> None:
    # Lone surrogates survive JSON decoding but no database can store them.
    try:
        text.encode()
    except UnicodeEncodeError as error:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from error
