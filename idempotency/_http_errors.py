"""HTTP errors of guarded endpoints: an endpoint's own refusals in, problem+json out."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from idempotency._errors import WriteSafeError, invalid_input
from reconciler import (
    Adapter,
    Classification,
    Code,
    CodeRegistry,
    ErrorEnvelope,
    exception_evidence,
    parse_retry_after,
    to_problem,
)

# An endpoint that raises HTTPException with one of these statuses refused the request before
# writing anything: that is what a 4xx (or a 503) says in HTTP.
_REFUSALS: dict[int, Code] = {
    401: Code.AUTH_REQUIRED,
    403: Code.ACCESS_DENIED,
    429: Code.RATE_LIMITED,
    503: Code.TEMP_UNAVAILABLE,
}


REQUEST_FIELD = "request"
"""The field of an endpoint's 4xx refusal: the request as a whole, which is all it names."""


class HTTPExceptionAdapter:
    """Classifies an endpoint's `HTTPException` refusals; everything else goes to `inner`.

    401/403/429/503 become their codes (with Retry-After), other 4xx INPUT_INVALID naming the
    `request` as the input at fault (an HTTPException says no more). A 5xx other than 503 says
    nothing about side effects, so it is left to `inner` (fail closed by default).
    """

    def __init__(self, inner: Adapter) -> None:
        self.inner = inner
        self.name = f"http+{inner.name}"
        self.version = inner.version

    def classify(self, error: BaseException, codes: CodeRegistry) -> Classification:
        if not isinstance(error, HTTPException) or not _is_refusal(error.status_code):
            return self.inner.classify(error, codes)
        code = _REFUSALS.get(error.status_code, Code.INPUT_INVALID)
        detail = (
            error.detail if isinstance(error.detail, str) else HTTPStatus(error.status_code).phrase
        )
        field = REQUEST_FIELD if codes.verdict(code).names_field else None
        envelope = codes.envelope(code, detail, field=field, retry_after_ms=_retry_after_ms(error))
        return Classification(envelope, {**exception_evidence(error), "status": error.status_code})


def _is_refusal(status: int) -> bool:
    return 400 <= status < 500 or status == 503


def _retry_after_ms(error: HTTPException) -> int | None:
    value = (error.headers or {}).get("Retry-After")
    return None if value is None else parse_retry_after(value, now=datetime.now(UTC))


def problem_response(envelope: ErrorEnvelope, *, status: int | None = None) -> JSONResponse:
    """The envelope as problem+json (`reconciler.to_problem`); `status` overrides the code's own
    where HTTP is more specific (a malformed request is 400 rather than 422)."""
    problem = to_problem(envelope)
    body = problem.body
    if status is not None and status != problem.status:
        body = {**body, "status": status, "title": HTTPStatus(status).phrase}
    return JSONResponse(body, status or problem.status, headers=problem.headers)


def add_problem_handlers(app: FastAPI) -> None:
    """Answer FastAPI's request validation errors and any `WriteSafeError` an endpoint lets
    through as problem+json carrying the envelope, like the guarded routes' own failures."""
    app.add_exception_handler(RequestValidationError, _validation_problem)
    app.add_exception_handler(WriteSafeError, _writesafe_problem)


async def _validation_problem(_request: Request, error: Exception) -> JSONResponse:
    """Malformed JSON is a 400 (the request cannot be read), a schema violation a 422."""
    assert isinstance(error, RequestValidationError)
    first: Mapping[str, Any] = error.errors()[0] if error.errors() else {}
    if first.get("type") == "json_invalid":
        return problem_response(
            invalid_input("body", "the body is not valid JSON").envelope, status=400
        )
    location = [str(part) for part in first.get("loc", ())]
    field = ".".join(location[1:] if location[:1] == ["body"] else location) or "body"
    message = f"{field}: {first.get('msg', 'invalid')}"
    return problem_response(invalid_input(field, message).envelope)


async def _writesafe_problem(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, WriteSafeError)
    return problem_response(error.envelope)
