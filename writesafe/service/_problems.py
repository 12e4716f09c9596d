"""Every error the service answers is RFC 9457 problem+json, whatever raised it.

Errors the contract has a code for (401 AUTH_REQUIRED, 403 ACCESS_DENIED, 422 INPUT_INVALID,
429 RATE_LIMITED, 503 TEMP_UNAVAILABLE, and any `WriteSafeError`) are the envelope rendered by
`reconciler.to_problem`, so software branches on `code` here as everywhere else. The rest (404,
405, 409, 410, 413, 500) are `about:blank` problems that carry a `code` of the service's own
(`SERVICE_CODES`), so every answer can be branched on by a field. Starlette and FastAPI answer
their own errors in plain JSON; the handlers below re-render them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from http import HTTPStatus
from typing import Any

from fastapi import HTTPException as FastAPIHTTPException
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.exceptions import HTTPException

from writesafe.idempotency import WriteSafeError
from writesafe.reconciler import (
    CODES,
    PROBLEM_MEDIA_TYPE,
    Code,
    ErrorEnvelope,
    to_problem,
)

# HTTP errors that are contract codes; the contract's table gives each its status back, except
# 400 (FastAPI's "There was an error parsing the body"), which becomes 422 like all bad input.
_ENVELOPE_CODES = {
    400: Code.INPUT_INVALID,
    401: Code.AUTH_REQUIRED,
    403: Code.ACCESS_DENIED,
    503: Code.TEMP_UNAVAILABLE,
}
ENVELOPE_STATUSES = frozenset({*_ENVELOPE_CODES, 422, 429})


class InvalidParam(BaseModel):
    """One reason a request was refused: which part of it, and why."""

    location: str = Field(description="body, query, path or header")
    pointer: str = Field(description="JSON Pointer into the body, or the parameter's name")
    detail: str


# The service's own codes for the errors the contract has none for (stable, like its codes).
SERVICE_CODES = {
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    410: "EXPIRED",
    413: "BODY_TOO_LARGE",
    500: "INTERNAL_ERROR",
}


class ProblemDetails(BaseModel):
    """An RFC 9457 problem; members beyond these are extensions."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int = Field(ge=400, le=599)
    detail: str | None = None
    instance: str | None = None
    code: str = Field(
        description=(
            f"What went wrong, to branch on: {', '.join(sorted(SERVICE_CODES.values()))}, or for "
            "any other status its name (e.g. `NOT_ACCEPTABLE`)."
        ),
    )


class ExpiredProblem(ProblemDetails):
    """410 `EXPIRED`: the key's operation finished and was pruned after the retention period; a
    new call with the key is a new operation."""

    expired_at: datetime = Field(description="When retention pruned the key's operation.")


class Expired(FastAPIHTTPException):
    """The key's operation in the caller's scope was pruned at `expired_at` (its tombstone)."""

    def __init__(self, expired_at: datetime) -> None:
        super().__init__(
            410,
            f"the operation under this key expired: retention pruned it at "
            f"{expired_at.isoformat()}; a new call with the key is a new operation",
        )
        self.expired_at = expired_at


# The envelope's own fields (not a copy of them), as problem extension members.
_ENVELOPE_MEMBERS: dict[str, Any] = {
    "errors": (list[InvalidParam] | None, Field(default=None, description="Every invalid input.")),
    **{name: (info.annotation, info) for name, info in ErrorEnvelope.model_fields.items()},
}
EnvelopeProblem = create_model(
    "EnvelopeProblem",
    __base__=ProblemDetails,
    __doc__="A problem carrying the writesafe.error/1 envelope as extension members.",
    **_ENVELOPE_MEMBERS,
)


def service_code(status: int) -> str:
    """The `code` of a plain problem: the service's own, else the status's name (`NOT_ACCEPTABLE`),
    so that no answer lacks a field to branch on, whatever Starlette raises."""
    return SERVICE_CODES.get(status, HTTPStatus(status).name)


def problem_response(
    status: int,
    detail: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> JSONResponse:
    """A plain problem: `about:blank` with the status phrase as title (RFC 9457 §4.2.1)."""
    body = ProblemDetails(
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        code=service_code(status),
        **(extensions or {}),
    )
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True),
        status_code=status,
        headers=dict(headers or {}),
        media_type=PROBLEM_MEDIA_TYPE,
    )


def envelope_response(
    envelope: ErrorEnvelope,
    *,
    headers: Mapping[str, str] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> JSONResponse:
    """The contract's problem+json rendering of `envelope`, plus any extension members."""
    problem = to_problem(envelope)
    body = {**problem.body, **(extensions or {})}
    return JSONResponse(
        body, status_code=problem.status, headers={**problem.headers, **(headers or {})}
    )


def unavailable(
    message: str, store: str, extensions: Mapping[str, Any] | None = None
) -> JSONResponse:
    """503 TEMP_UNAVAILABLE: nothing was changed, try again shortly. `store` names the store
    that did not answer (`LEDGER` or `KEY_STORE`) as the envelope's typed `cause`."""
    envelope = CODES.envelope(
        Code.TEMP_UNAVAILABLE,
        message,
        retry_after_ms=1_000,
        cause=store,
    )
    return envelope_response(envelope, extensions=extensions)


async def envelope_error(_request: Request, error: Exception) -> JSONResponse:
    """A `WriteSafeError` raised by the library (e.g. the ledger could not be reached)."""
    assert isinstance(error, WriteSafeError)
    return envelope_response(error.envelope)


async def http_error(_request: Request, error: Exception) -> JSONResponse:
    """Starlette/FastAPI HTTP errors (404, 405 with its Allow header, 401, 403, 413…)."""
    assert isinstance(error, HTTPException)
    detail = error.detail if error.detail != HTTPStatus(error.status_code).phrase else None
    code = _ENVELOPE_CODES.get(error.status_code)
    message = detail or HTTPStatus(error.status_code).phrase
    if code is Code.INPUT_INVALID:
        issue = InvalidParam(location="body", pointer="", detail=message)
        envelope = CODES.envelope(code, message, field="body")
        return envelope_response(envelope, extensions={"errors": [issue.model_dump()]})
    if code is not None:
        return envelope_response(CODES.envelope(code, message), headers=error.headers)
    extensions = {"expired_at": error.expired_at} if isinstance(error, Expired) else None
    return problem_response(error.status_code, detail, headers=error.headers, extensions=extensions)


async def validation_error(_request: Request, error: Exception) -> JSONResponse:
    """Malformed JSON and schema violations alike: INPUT_INVALID naming every invalid input."""
    assert isinstance(error, RequestValidationError)
    issues = [_issue(e, error.body) for e in error.errors()]
    field = (issues[0].pointer or issues[0].location) if issues else None
    envelope = CODES.envelope(
        Code.INPUT_INVALID, "the request does not match the schema", field=field
    )
    return envelope_response(envelope, extensions={"errors": [i.model_dump() for i in issues]})


def _issue(error: Mapping[str, Any], body: Any) -> InvalidParam:
    location, *path = error.get("loc", ())
    context = error.get("ctx") or {}
    if error.get("type") == "json_invalid":
        reason = context.get("error", "invalid JSON")
        return InvalidParam(location="body", pointer="", detail=f"not JSON: {reason}")
    if location != "body":
        return InvalidParam(
            location=str(location),
            pointer=".".join(str(p) for p in path),
            detail=str(error.get("msg", "")),
        )
    if error.get("type") in ("union_tag_invalid", "union_tag_not_found"):
        path = [*path, str(context.get("discriminator", "")).strip("'")]
    return InvalidParam(
        location="body", pointer=_pointer(path, body), detail=str(error.get("msg", ""))
    )


def _pointer(path: Sequence[Any], body: Any) -> str:
    """A JSON Pointer (RFC 6901) into `body`; pydantic's location also names union members (a
    tagged union's tag), which are not in the document and are left out."""
    parts: list[str] = []
    for index, part in enumerate(path):
        last = index == len(path) - 1
        if (isinstance(body, dict) and part in body) or (
            isinstance(body, list) and isinstance(part, int) and 0 <= part < len(body)
        ):
            body = body[part]
        elif not last:
            continue
        parts.append(str(part).replace("~", "~0").replace("/", "~1"))
    return "".join(f"/{part}" for part in parts)
