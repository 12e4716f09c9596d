"""The error contract `writesafe.error/1`: one typed envelope, and the verdicts behind its codes.

Software branches on `code` and the typed fields, never on `message`. Every code has exactly one
verdict (side effects, retryable, next action, how a client ends); a code nobody registered is
treated as UNKNOWN_ERROR, which fails closed: no automatic retry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from writesafe.reconciler._causes import Untrusted

SCHEMA = "writesafe.error/1"
MESSAGE_LIMIT = 512
FIELD_LIMIT = 256

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CODE = re.compile(r"^[A-Z][A-Z0-9_]{1,63}$")
_CAUSE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{1,63}$")


class SideEffects(StrEnum):
    """Whether the failed call may have changed anything downstream."""

    NONE = "none"
    UNKNOWN = "unknown"


class NextAction(StrEnum):
    """What the caller should do next."""

    CORRECT_INPUT = "correct_input"
    AUTHENTICATE = "authenticate"
    STOP = "stop"
    RETRY_AFTER_DELAY = "retry_after_delay"
    RECONCILE = "reconcile"
    HANDOFF = "handoff"


class Disposition(StrEnum):
    """How a client that follows the contract ends when this code is final."""

    NEEDS_INPUT = "needs_input"
    NEEDS_AUTH = "needs_auth"
    REFUSED = "refused"
    RETRY_EXHAUSTED = "retry_exhausted"
    UNKNOWN = "unknown"


class Code(StrEnum):
    """The built-in codes."""

    INPUT_INVALID = "INPUT_INVALID"
    AUTH_REQUIRED = "AUTH_REQUIRED"
    ACCESS_DENIED = "ACCESS_DENIED"
    TEMP_UNAVAILABLE = "TEMP_UNAVAILABLE"
    DEPENDENCY_BUSY = "DEPENDENCY_BUSY"
    RATE_LIMITED = "RATE_LIMITED"
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    IN_PROGRESS = "IN_PROGRESS"
    KEY_REUSED = "KEY_REUSED"
    RETRY_EXHAUSTED = "RETRY_EXHAUSTED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    RESULT_NOT_STORED = "RESULT_NOT_STORED"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a code means for the caller; `disposition` is None where the code is not an end.

    A verdict must be coherent: a code is retryable exactly when its next action is to retry
    after a delay, and a code that asks for reconciliation cannot claim there was no effect.
    """

    side_effects: SideEffects
    retryable: bool
    next_action: NextAction
    disposition: Disposition | None

    def __post_init__(self) -> None:
        # Accept the enums' string values (e.g. from configuration), reject anything else.
        object.__setattr__(self, "side_effects", SideEffects(self.side_effects))
        object.__setattr__(self, "next_action", NextAction(self.next_action))
        if self.disposition is not None:
            object.__setattr__(self, "disposition", Disposition(self.disposition))
        if not isinstance(self.retryable, bool):
            raise TypeError("retryable must be a bool")
        if self.retryable != (self.next_action is NextAction.RETRY_AFTER_DELAY):
            raise ValueError(
                "a code is retryable exactly when its next action is retry_after_delay"
            )
        if self.next_action is NextAction.RECONCILE and self.side_effects is SideEffects.NONE:
            raise ValueError("a code that asks for reconciliation must have side_effects unknown")

    @property
    def names_field(self) -> bool:
        """An envelope of this verdict names the input to correct, and only it names one: the
        caller cannot correct an input it is not told, and a field on any other verdict would
        point a caller at an input that is not at fault."""
        return self.next_action is NextAction.CORRECT_INPUT


_S, _A, _D = SideEffects, NextAction, Disposition

BUILTIN_VERDICTS: dict[str, Verdict] = {
    Code.INPUT_INVALID: Verdict(_S.NONE, False, _A.CORRECT_INPUT, _D.NEEDS_INPUT),
    Code.AUTH_REQUIRED: Verdict(_S.NONE, False, _A.AUTHENTICATE, _D.NEEDS_AUTH),
    Code.ACCESS_DENIED: Verdict(_S.NONE, False, _A.STOP, _D.REFUSED),
    Code.TEMP_UNAVAILABLE: Verdict(_S.NONE, True, _A.RETRY_AFTER_DELAY, _D.RETRY_EXHAUSTED),
    Code.DEPENDENCY_BUSY: Verdict(_S.NONE, True, _A.RETRY_AFTER_DELAY, _D.RETRY_EXHAUSTED),
    Code.RATE_LIMITED: Verdict(_S.NONE, True, _A.RETRY_AFTER_DELAY, _D.RETRY_EXHAUSTED),
    Code.OUTCOME_UNKNOWN: Verdict(_S.UNKNOWN, False, _A.RECONCILE, None),
    Code.IN_PROGRESS: Verdict(_S.UNKNOWN, True, _A.RETRY_AFTER_DELAY, None),
    Code.KEY_REUSED: Verdict(_S.NONE, False, _A.CORRECT_INPUT, None),
    Code.RETRY_EXHAUSTED: Verdict(_S.NONE, False, _A.STOP, _D.RETRY_EXHAUSTED),
    Code.UNKNOWN_ERROR: Verdict(_S.UNKNOWN, False, _A.HANDOFF, _D.UNKNOWN),
    # The write ran (its operation is `succeeded`) but its result could not be stored: no
    # caller gets it, and the key never runs again. The contract has no "applied" side effect.
    Code.RESULT_NOT_STORED: Verdict(_S.UNKNOWN, False, _A.HANDOFF, _D.UNKNOWN),
}


class OperationInfo(BaseModel):
    """Where the operation behind an error stands."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    key: str
    status: str
    attempt: int = Field(ge=0)
    attempts_left: int = Field(ge=0)
    # True when budget was left but the dependency's retry budget refused another execution.
    throttled: bool = False


def sanitize_message(message: str) -> str:
    """Strip control characters and any traceback, and bound the length."""
    message = message.split("Traceback (most recent call last)")[0]
    message = _CONTROL.sub(" ", message).strip()
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 1] + "…"
    return message


class ErrorEnvelope(BaseModel):
    """The one error shape every failure reaches a caller in."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        json_schema_serialization_defaults_required=True,
    )

    schema_: Literal["writesafe.error/1"] = Field(
        default="writesafe.error/1", alias="schema", description="The contract and its version."
    )
    code: Annotated[
        str, Field(pattern=_CODE.pattern, description="Stable code; branch on this, never on text.")
    ]
    message: Annotated[
        str, Field(max_length=MESSAGE_LIMIT, description="For humans: bounded, no tracebacks.")
    ]
    retryable: Annotated[
        bool, Field(strict=True, description="True only if retrying unchanged can succeed.")
    ]
    field: Annotated[
        str | None,
        Field(
            min_length=1, max_length=FIELD_LIMIT, description="The input field to correct, if any."
        ),
    ] = None
    retry_after_ms: Annotated[
        int | None,
        Field(ge=0, strict=True, description="Wait at least this long before trying again."),
    ] = None
    next_action: NextAction
    side_effects: SideEffects
    cause: Annotated[
        str | None,
        Field(
            pattern=_CAUSE.pattern,
            description=(
                "What led to this code: for RETRY_EXHAUSTED the code whose retries used up the "
                "budget, for UNKNOWN_ERROR why nothing more specific could be trusted."
            ),
        ),
    ] = None
    operation: OperationInfo | None = Field(
        default=None, description="Where the operation behind the error stands, if there is one."
    )

    @field_validator("message", mode="before")
    @classmethod
    def _bounded_message(cls, value: object) -> object:
        return sanitize_message(value) if isinstance(value, str) else value

    @field_validator("field", mode="before")
    @classmethod
    def _bounded_field(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        return _CONTROL.sub("", value).strip()[:FIELD_LIMIT] or None

    def to_json_dict(self) -> dict[str, Any]:
        """The wire form (`schema` spelled as such, enums as strings)."""
        return self.model_dump(mode="json", by_alias=True)

    def with_operation(self, operation: OperationInfo | None) -> ErrorEnvelope:
        return self.model_copy(update={"operation": operation})


class UnknownCode(KeyError):
    """A verdict was requested for a code nobody registered."""


class CodeRegistry:
    """The codes writesafe knows, each with one explicit verdict; built-ins cannot be redefined."""

    def __init__(self) -> None:
        self._verdicts: dict[str, Verdict] = dict(BUILTIN_VERDICTS)

    def register(self, code: str, verdict: Verdict) -> None:
        """Teach the registry a new code; its verdict must be given in full."""
        if not _CODE.match(code):
            raise ValueError(f"codes are UPPER_SNAKE_CASE, 2-64 characters: {code!r}")
        known = self._verdicts.get(code)
        if known is not None and known != verdict:
            raise ValueError(f"{code} is already registered with a different verdict")
        self._verdicts[code] = verdict

    def verdict(self, code: str) -> Verdict:
        try:
            return self._verdicts[code]
        except KeyError:
            raise UnknownCode(code) from None

    def __contains__(self, code: object) -> bool:
        return code in self._verdicts

    def verdicts(self) -> dict[str, Verdict]:
        """Every known code with its verdict, built-ins first."""
        return dict(self._verdicts)

    def envelope(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        retry_after_ms: int | None = None,
        side_effects: SideEffects | None = None,
        cause: str | None = None,
        operation: OperationInfo | None = None,
    ) -> ErrorEnvelope:
        """Build an envelope whose typed fields come from the code's verdict.

        An unregistered code fails closed to UNKNOWN_ERROR (cause `unregistered_code`, no field:
        whatever the field meant belonged to a code nobody knows), naming the code in the message.
        `side_effects=NONE` may narrow UNKNOWN_ERROR where an adapter proved nothing was sent.
        """
        if code not in self._verdicts:
            message = f"unregistered code {code}: {message}"
            code, field, cause = Code.UNKNOWN_ERROR, None, Untrusted.UNREGISTERED_CODE.value
        verdict = self._verdicts[code]
        return ErrorEnvelope(
            code=code,
            message=message,
            retryable=verdict.retryable,
            field=field,
            retry_after_ms=retry_after_ms,
            next_action=verdict.next_action,
            side_effects=_narrowed(code, verdict.side_effects, side_effects),
            cause=None if cause is None else str(cause),
            operation=operation,
        )


def _narrowed(code: str, default: SideEffects, proven: SideEffects | None) -> SideEffects:
    # Only UNKNOWN_ERROR's side effects are open to evidence: every other code's are part of
    # what the code means (OUTCOME_UNKNOWN with "no effect" would be a contradiction).
    if code == Code.UNKNOWN_ERROR and proven is SideEffects.NONE:
        return SideEffects.NONE
    return default


CODES = CodeRegistry()
"""The process-wide registry used unless a `WriteSafe` is given its own."""
