"""Request and response bodies of the service that are not the library's own views."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from writesafe.idempotency import MAX_KEY_LENGTH
from writesafe.idempotency._keys import hidden_characters
from writesafe.ledger import Status, canonical_json
from writesafe.reconciler import AttemptView, OperationSummary
from writesafe.service._cursor import CURSOR_PATTERN

REASON_LIMIT = 2_000
_HIDDEN = hidden_characters(allowed="\t\r\n")  # what a reason may not hold; it may have lines
MAX_PAGE = 500


def _integral(value: Any) -> Any:
    # JSON Schema counts 3.0 as an integer; strict pydantic would not (and lax would take "3").
    return int(value) if isinstance(value, float) and value.is_integer() else value


JsonInt = Annotated[int, BeforeValidator(_integral)]
"""An integer as JSON Schema means it: 3 and 3.0, but not "3" or true (models are strict)."""


class ListQuery(BaseModel):
    """Filters and page of `GET /v1/operations`; an unknown parameter is refused, not ignored."""

    model_config = ConfigDict(extra="forbid")
    REPEATABLE: ClassVar[frozenset[str]] = frozenset({"status"})

    status: list[Status] | None = Field(default=None, description="Only these (repeatable).")
    tool: str | None = Field(default=None, max_length=MAX_KEY_LENGTH, description="Only this tool.")
    older_than: int | None = Field(
        default=None,
        ge=0,
        le=10 * 366 * 24 * 3600,
        description="Only operations unchanged for at least this many seconds.",
    )
    cursor: str | None = Field(
        default=None,
        pattern=CURSOR_PATTERN,
        description="`next_cursor` of the previous page: opaque, and only for the API key's scope.",
    )
    limit: int = Field(default=50, ge=1, le=MAX_PAGE, description="Page size.")


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


class _Resolution(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, regex_engine="python-re")

    reason: str = Field(
        min_length=1,
        max_length=REASON_LIMIT,
        # Not blank and no NUL, checked here; Python's `\s` is what the ledger strips. The
        # schema says more: `resolve` also refuses every other control or format character but
        # line breaks and tabs, and names the one it found.
        pattern=r"^[^\x00]*[^\s\x00][^\x00]*$",
        json_schema_extra={"pattern": f"^[^{_HIDDEN}]*[^\\s{_HIDDEN}][^{_HIDDEN}]*$"},
        description="Why, with the evidence checked (kept in the audit record).",
    )
    evidence: dict[str, Any] | None = Field(
        default=None, description="Evidence to keep with the resolution (a JSON object)."
    )

    @field_validator("reason")
    @classmethod
    def _storable_reason(cls, value: str) -> str:
        _require_utf8(value)
        return value

    @field_validator("evidence")
    @classmethod
    def _storable_evidence(cls, value: Any) -> Any:
        return _storable_json(value)


class ResolveSucceeded(_Resolution):
    """The effect exists: `result` becomes what callers with the key get back."""

    outcome: Literal["succeeded"]
    result: Any = Field(default=None, description="The operation's result (any JSON).")

    @field_validator("result")
    @classmethod
    def _storable_result(cls, value: Any) -> Any:
        return _storable_json(value)


class ResolveFailed(_Resolution):
    """The effect provably does not exist: the key may continue within its budget."""

    outcome: Literal["failed"]


ResolveRequest = Annotated[ResolveSucceeded | ResolveFailed, Field(discriminator="outcome")]
"""An operator's verdict on an operation that reconciliation could not decide."""


class ReconcileRequest(BaseModel):
    """Bounds of one reconciliation pass."""

    model_config = ConfigDict(extra="forbid", strict=True)

    limit: JsonInt = Field(default=100, ge=1, le=1_000, description="Operations examined at most.")
    older_than: float = Field(
        default=0.0,
        ge=0,
        le=366 * 24 * 3600,
        description="Only operations whose last attempt was sent at least this many seconds ago.",
    )


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready"] = "ready"
    checks: dict[str, str] = Field(description="Each store and how it answered.")


def _storable_json(value: Any) -> Any:
    try:
        _require_utf8(canonical_json(value))
    except RecursionError as error:
        raise ValueError("nested too deeply") from error
    return value


def _require_utf8(text: str) -> None:
    # Lone surrogates survive JSON decoding but no database can store them.
    try:
        text.encode()
    except UnicodeEncodeError as error:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from error
