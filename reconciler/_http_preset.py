"""The HTTP preset: an adapter for httpx tools that maps status codes by their RFC 9110 meaning.

A tool that calls `response.raise_for_status()` hands every non-2xx answer to its adapter; the
default adapter knows no statuses, so an ordinary 422 or 503 would end the key as UNKNOWN_ERROR.
This preset maps the statuses whose meaning says what happened (each mapping is justified in
docs/contract.md). A status whose meaning leaves the outcome open — 409 Conflict, any 5xx but
503 and 504 — is not mapped: it fails closed to UNKNOWN_ERROR, as the recorded order scenario
requires of an unrecognised conflict. Put your exact rules first with `http_adapter(rules=...)`.
httpx's exceptions (connect errors, timeouts) keep the built-in classification.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from writesafe.reconciler._causes import Lost, Untrusted
from writesafe.reconciler._contract import Code, SideEffects
from writesafe.reconciler._response import RawResponse
from writesafe.reconciler._rules import ResponseAdapter, Rule

FIELD_MEMBER = "field"
"""The body member a 400/422 answer names its invalid input in (`{"field": "postcode"}`)."""

REFUSED_REQUESTS = (400, 404, 405, 406, 410, 411, 412, 413, 414, 415, 431)
"""Client errors (RFC 9110 §15.5) where the server refused the request as such before acting on
it, and no input is named: UNKNOWN_ERROR, but with no effect (the key ends `failed`)."""


def _names_field(response: RawResponse, body: Any) -> bool:
    return isinstance(body, dict) and isinstance(body.get(FIELD_MEMBER), str)


HTTP_RULES: tuple[Rule, ...] = (
    Rule(
        Code.INPUT_INVALID,
        status=(400, 422),
        when=_names_field,
        field_from=FIELD_MEMBER,
        name="invalid input named by the body",
    ),
    Rule(Code.INPUT_INVALID, status=422, field="body", name="422 unprocessable content"),
    Rule(Code.AUTH_REQUIRED, status=401, name="401 unauthorized"),
    Rule(Code.ACCESS_DENIED, status=403, name="403 forbidden"),
    Rule(Code.TEMP_UNAVAILABLE, status=408, name="408 request timeout"),
    Rule(Code.RATE_LIMITED, status=429, name="429 too many requests"),
    Rule(Code.TEMP_UNAVAILABLE, status=503, name="503 service unavailable"),
    Rule(Code.OUTCOME_UNKNOWN, status=504, cause=Lost.TIMEOUT.value, name="504 gateway timeout"),
    Rule(
        Code.UNKNOWN_ERROR,
        status=REFUSED_REQUESTS,
        side_effects=SideEffects.NONE,
        cause=Untrusted.REFUSED_REQUEST.value,
        name="request refused",
    ),
)
"""The preset's rules, in order; see docs/contract.md "The HTTP preset" for why each holds."""


def http_adapter(
    name: str = "http",
    version: str = "1",
    *,
    rules: tuple[Rule, ...] = (),
    fields: Mapping[str, str] | None = None,
) -> ResponseAdapter:
    """The HTTP preset, with your exact `rules` (and field translations) ahead of its own."""
    return ResponseAdapter(
        name=name, version=version, rules=(*rules, *HTTP_RULES), fields=dict(fields or {})
    )


HTTP_ADAPTER = http_adapter()
"""The preset as is, for tools whose downstream speaks plain HTTP."""
