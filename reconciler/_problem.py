"""The envelope as HTTP problem details (RFC 9457): a status per code, the envelope as extensions.

The body carries `type`, `title`, `status` and `detail` for generic HTTP clients, plus every
envelope field as an extension member, so a writesafe-aware client reads the envelope back
unchanged. `Retry-After` (delta-seconds, rounded up) is sent whenever `retry_after_ms` is set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import ConfigDict, Field

from writesafe.reconciler._causes import Untrusted
from writesafe.reconciler._classify import Classification
from writesafe.reconciler._contract import CODES, Code, CodeRegistry, ErrorEnvelope, NextAction
from writesafe.reconciler._wire import Malformed, malformed, parse_json, read_envelope

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE_PREFIX = "tag:writesafe,2026:error/"
"""Problem types are tag URIs (RFC 4151): identifiers, not links to dereference."""

PROBLEM_MEMBERS = frozenset({"type", "title", "status", "detail", "instance"})

HTTP_STATUS: dict[str, tuple[int, str]] = {
    Code.INPUT_INVALID: (422, "Input invalid"),
    Code.AUTH_REQUIRED: (401, "Authentication required"),
    Code.ACCESS_DENIED: (403, "Access denied"),
    Code.TEMP_UNAVAILABLE: (503, "Temporarily unavailable"),
    Code.DEPENDENCY_BUSY: (503, "Dependency busy"),
    Code.RATE_LIMITED: (429, "Rate limited"),
    Code.OUTCOME_UNKNOWN: (504, "Outcome unknown"),
    Code.IN_PROGRESS: (409, "Request in progress"),
    Code.KEY_REUSED: (422, "Idempotency key reused"),
    Code.RETRY_EXHAUSTED: (503, "Retries exhausted"),
    Code.UNKNOWN_ERROR: (502, "Unknown error"),
    Code.RESULT_NOT_STORED: (502, "Result not stored"),
}
"""Status and title of each built-in code (409 and 422 for keys, as the IETF Idempotency-Key
draft uses them)."""

HTTP_STATUS_BY_ACTION: dict[NextAction, int] = {
    NextAction.CORRECT_INPUT: 422,
    NextAction.AUTHENTICATE: 401,
    NextAction.STOP: 403,
    NextAction.RETRY_AFTER_DELAY: 503,
    NextAction.RECONCILE: 504,
    NextAction.HANDOFF: 502,
}
"""Statuses of registered user codes, which the code table cannot know: by next action."""


class ProblemBody(ErrorEnvelope):
    """The body `to_problem` renders, for documents that describe it (OpenAPI): the RFC 9457
    members, then every envelope member as an extension. Never built at run time."""

    model_config = ConfigDict(title="WriteSafeProblem")  # a component name users will not have

    type: str = Field(description="The problem type: a tag URI ending in the code.")
    title: str
    status: int = Field(ge=400, le=599)
    detail: str = Field(description="The envelope's message.")


@dataclass(frozen=True, slots=True)
class Problem:
    """An HTTP error response: status, headers (Content-Type, Retry-After) and JSON body."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def to_problem(
    envelope: ErrorEnvelope,
    *,
    instance: str | None = None,
    type_prefix: str = PROBLEM_TYPE_PREFIX,
) -> Problem:
    """Render `envelope` as problem+json; `instance` may name the request or operation."""
    status, title = _status_and_title(envelope)
    body: dict[str, Any] = {
        "type": f"{type_prefix}{envelope.code}",
        "title": title,
        "status": status,
        "detail": envelope.message,
        **envelope.to_json_dict(),
    }
    if instance is not None:
        body["instance"] = instance
    headers = {"Content-Type": PROBLEM_MEDIA_TYPE}
    if envelope.retry_after_ms is not None:
        headers["Retry-After"] = str(math.ceil(envelope.retry_after_ms / 1000))
    return Problem(status, body, headers)


def from_problem(body: object, codes: CodeRegistry = CODES) -> Classification:
    """The envelope inside a problem body (JSON text or decoded), or UNKNOWN_ERROR if it carries
    none that is valid."""
    if isinstance(body, bytes | str):
        try:
            body = parse_json(body)
        except Malformed as error:
            return malformed(error, body, codes)
    if not isinstance(body, dict):
        detail = f"a problem is a JSON object, not {type(body).__name__}"
        return malformed(Malformed(Untrusted.NOT_AN_OBJECT, detail), body, codes)
    envelope = {k: v for k, v in body.items() if k not in PROBLEM_MEMBERS}
    return read_envelope(envelope, codes)


def _status_and_title(envelope: ErrorEnvelope) -> tuple[int, str]:
    known = HTTP_STATUS.get(envelope.code)
    if known is not None:
        return known
    title = envelope.code.replace("_", " ").capitalize()
    return HTTP_STATUS_BY_ACTION[envelope.next_action], title
