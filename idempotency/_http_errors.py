"""HTTP errors of guarded endpoints: an endpoint's own refusals in, problem+json out."""

from __future__ import annotations

from http import HTTPStatus

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from reconciler import Adapter, Classification, Code, CodeRegistry, ErrorEnvelope, exception_evidence

# An endpoint that raises HTTPException with one of these statuses refused the request before
# writing anything: that is what a 4xx (or a 503) says in HTTP.
_REFUSALS: dict[int, Code] = {
    401: Code.AUTH_REQUIRED,
    403: Code.ACCESS_DENIED,
    429: Code.RATE_LIMITED,
    503: Code.TEMP_UNAVAILABLE,
}


class HTTPExceptionAdapter:
    """Classifies an endpoint's `HTTPException` refusals; everything else goes to `inner`.

    401/403/429/503 become their codes (with Retry-After), other 4xx INPUT_INVALID. A 5xx other
    than 503 says nothing about side effects, so it is left to `inner` (fail closed by default).
    """

    def __init__(self, inner: Adapter) -> None:
        self.inner = inner
        self.name = f"http+{inner.name}"
        self.version = inner.version

    def classify(self, error: BaseException, codes: CodeRegistry) -> Classification:
        if not isinstance(error, HTTPException) or not _is_refusal(error.status_code):
            return self.inner.classify(error, codes)
        code = _REFUSALS.get(error.status_code, Code.INPUT_INVALID)
        detail = error.detail if isinstance(error.detail, str) else HTTPStatus(error.status_code).phrase
        envelope = codes.envelope(code, detail, retry_after_ms=_retry_after_ms(error))
        return Classification(envelope, {**exception_evidence(error), "status": error.status_code})


def _is_refusal(status: int) -> bool:
    return 400 <= status < 500 or status == 503


def _retry_after_ms(error: HTTPException) -> int | None:
    value = (error.headers or {}).get("Retry-After", "")
    return int(value) * 1000 if value.isdigit() else None


# INTERIM until the contract's problem+json rendering lands (branch `contract`).
_STATUS = {
    Code.INPUT_INVALID: 400,
    Code.AUTH_REQUIRED: 401,
    Code.ACCESS_DENIED: 403,
    Code.TEMP_UNAVAILABLE: 503,
    Code.DEPENDENCY_BUSY: 503,
    Code.RATE_LIMITED: 429,
    Code.OUTCOME_UNKNOWN: 502,
    Code.IN_PROGRESS: 409,
    Code.KEY_REUSED: 422,
    Code.RETRY_EXHAUSTED: 503,
    Code.UNKNOWN_ERROR: 502,
}


def problem_response(envelope: ErrorEnvelope) -> JSONResponse:
    status = _STATUS.get(envelope.code, 502)
    body = {"type": "about:blank", "title": HTTPStatus(status).phrase, "status": status,
            "detail": envelope.message, "error": envelope.to_json_dict()}
    headers = {}
    if envelope.retry_after_ms is not None:
        headers["Retry-After"] = str(-(-envelope.retry_after_ms // 1000))
    return JSONResponse(body, status, headers=headers, media_type="application/problem+json")
