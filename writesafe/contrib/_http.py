"""The `Idempotency-Key` semantics every HTTP integration shares (IETF httpapi draft).

A guarded endpoint's answer (status and JSON body) is its operation's stored result. The first
answer and every replay are rendered from it, so they are the same bytes; a replay says
`Idempotent-Replayed: true`. Failures are problem+json carrying the envelope (409 IN_PROGRESS with
`Retry-After`, 422 KEY_REUSED, ...); a missing or malformed key is 400. The request is fingerprinted
by method, path, query and body, with key order in a JSON body left out. FastAPI (`_fastapi`),
Flask (`_flask`) and Django (`_django`) only translate their own requests and responses.

Client errors stay client errors: a body declared JSON that is not JSON is 400 before any
operation exists, an endpoint's own 4xx refusal keeps its status (first answer and replays), and
a duplicate of a request still running is 409 at once, as the draft has it, unless the route
asks for a short wait (`wait_timeout=`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from writesafe.idempotency._errors import WriteSafeError, invalid_input
from writesafe.idempotency._header import parse_idempotency_key
from writesafe.idempotency._keys import DEFAULT_SCOPE
from writesafe.reconciler import (
    DEFAULT_ADAPTER,
    Adapter,
    Classification,
    Code,
    CodeRegistry,
    ErrorEnvelope,
    Found,
    LookupOperation,
    LookupResult,
    Problem,
    exception_evidence,
    parse_retry_after,
    to_problem,
)

if TYPE_CHECKING:
    from writesafe.idempotency._writesafe import WriteSafe

REPLAYED_HEADER = "Idempotent-Replayed"
JSON_MEDIA_TYPE = "application/json"
MALFORMED_KEY_STATUS = 400  # the draft's status for a missing or malformed key
MALFORMED_BODY_STATUS = 400  # a body that cannot be read at all, as FastAPI's own answer
IN_FLIGHT_WAIT_SECONDS = 0.0
"""How long a duplicate of a running request waits for it by default: not at all, so it gets
its 409 at once (the draft's answer; a client's retry loop does the waiting). A route's own
`wait_timeout=` asks for a short wait instead."""

# A refusal the endpoint raised with one of these statuses was made before writing anything:
# that is what a 4xx (or a 503) says in HTTP. Other 4xx are INPUT_INVALID.
_REFUSALS: dict[int, Code] = {
    401: Code.AUTH_REQUIRED,
    403: Code.ACCESS_DENIED,
    429: Code.RATE_LIMITED,
    503: Code.TEMP_UNAVAILABLE,
}


class StoredResponse(BaseModel):
    """A guarded endpoint's answer, replayed to every retry of its key."""

    model_config = ConfigDict(frozen=True)

    status_code: int | None
    """None for a result a lookup found downstream: the route's success status is used."""
    body: Any = None


# -- the request's fingerprint ------------------------------------------------------------------


def request_payload(
    method: str, path: str, query: Iterable[tuple[str, str]], body: Any
) -> dict[str, Any]:
    """What identifies a request for the fingerprint (and the audit)."""
    return {"method": method, "path": path, "query": sorted(query), "body": body}


def body_payload(raw: bytes) -> Any:
    """A body's part of the fingerprint: its JSON (key order does not matter), else its digest."""
    if not raw:
        return None
    try:
        return {"json": json.loads(raw)}
    except (ValueError, RecursionError):
        return {"sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}


def malformed_json(content_type: str | None, raw: bytes) -> HttpAnswer | None:
    """The 400 for a body its Content-Type declares JSON that is not JSON, before any operation
    exists (the view would fail parsing it, and that failure would say nothing about effects);
    None for any other body."""
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if not raw or not (media_type == JSON_MEDIA_TYPE or media_type.endswith("+json")):
        return None
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        error = invalid_input("body", "the body is not valid JSON")
        return problem_answer(error.envelope, status=MALFORMED_BODY_STATUS)
    return None


def tool_options(options: dict[str, Any]) -> dict[str, Any]:
    """A route's options for `ws.tool`: an in-flight duplicate waits only when asked."""
    return {"wait_timeout": IN_FLIGHT_WAIT_SECONDS, **options}


def json_body(raw: bytes) -> Any:
    """The JSON an endpoint answered, to store; anything else cannot be replayed."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise TypeError("a guarded endpoint must answer JSON") from None


# -- lookups ------------------------------------------------------------------------------------


def stored_found(found: LookupResult) -> LookupResult:
    """A route's lookup finds the response body; the operation stores it as the route's answer."""
    if isinstance(found, Found):
        return Found(StoredResponse(status_code=None, body=to_jsonable_python(found.result)))
    return found


def found_bodies(
    lookup: Callable[[LookupOperation], Awaitable[LookupResult]],
) -> Callable[[LookupOperation], Awaitable[LookupResult]]:
    async def find(operation: LookupOperation) -> LookupResult:
        return stored_found(await lookup(operation))

    return find


# -- the endpoint's own refusals ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refusal:
    """An HTTP refusal an endpoint raised, as its framework spells it."""

    status: int
    detail: str | None = None
    retry_after: str | None = None  # the Retry-After header's value, if it sent one


REQUEST_FIELD = "request"
"""The field of an endpoint's 4xx refusal: the request as a whole, which is all it names."""

_REFUSED_CAUSE = re.compile(r"http_(4\d\d)")


def refused_cause(status: int) -> str:
    """The envelope's cause for an endpoint's 4xx refusal: its status, which the stored envelope
    keeps so that the first answer and every replay say the status the endpoint chose."""
    return f"http_{status}"


def refused_status(envelope: ErrorEnvelope) -> int | None:
    """The status an endpoint's own 4xx refusal chose (`refused_cause`), or None."""
    match = _REFUSED_CAUSE.fullmatch(envelope.cause or "")
    if envelope.code != Code.INPUT_INVALID or match is None:
        return None
    return int(match[1])


class RefusalAdapter:
    """Classifies an endpoint's HTTP refusals (`refusal(error)`); everything else goes to `inner`.

    401/403/429/503 become their codes (with Retry-After), other 4xx INPUT_INVALID naming the
    `request` as the input at fault (a refusal says no more), with the status as its cause
    (`refused_cause`: answered with that status, not 422). A 5xx other than 503 says nothing
    about side effects, so it is left to `inner` (fail closed by default).
    """

    def __init__(self, inner: Adapter, refusal: Callable[[BaseException], Refusal | None]) -> None:
        self.inner = inner
        self.name = f"http+{inner.name}"
        self.version = inner.version
        self._refusal = refusal

    def classify(self, error: BaseException, codes: CodeRegistry) -> Classification:
        refusal = self._refusal(error)
        if refusal is None or not (400 <= refusal.status < 500 or refusal.status == 503):
            return self.inner.classify(error, codes)
        code = _REFUSALS.get(refusal.status, Code.INPUT_INVALID)
        detail = refusal.detail or HTTPStatus(refusal.status).phrase
        retry_after = (
            None
            if refusal.retry_after is None
            else parse_retry_after(refusal.retry_after, now=datetime.now(UTC))
        )
        field = REQUEST_FIELD if codes.verdict(code).names_field else None
        cause = refused_cause(refusal.status) if code == Code.INPUT_INVALID else None
        envelope = codes.envelope(
            code, detail, field=field, retry_after_ms=retry_after, cause=cause
        )
        return Classification(envelope, {**exception_evidence(error), "status": refusal.status})


# -- answers ------------------------------------------------------------------------------------


def problem(envelope: ErrorEnvelope, *, status: int | None = None) -> Problem:
    """The envelope as problem+json (`reconciler.to_problem`); `status` overrides the code's own
    where HTTP is more specific (a malformed request is 400 rather than 422), as does the status
    of an endpoint's own refusal (`refused_status`)."""
    rendered = to_problem(envelope)
    status = status or refused_status(envelope)
    if status is None or status == rendered.status:
        return rendered
    body = {**rendered.body, "status": status, "title": HTTPStatus(status).phrase}
    return Problem(status, body, rendered.headers)


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """A response for a WSGI framework to send: status, headers (Content-Type included), bytes."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes = b""


def render_json(body: Any) -> bytes:
    """JSON bytes as Starlette's `JSONResponse` renders them, so every integration sends the
    same bytes for the same stored answer."""
    return json.dumps(
        body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


def problem_answer(envelope: ErrorEnvelope, *, status: int | None = None) -> HttpAnswer:
    rendered = problem(envelope, status=status)
    return HttpAnswer(rendered.status, dict(rendered.headers), render_json(rendered.body))


def body_allowed(status: int) -> bool:
    """Whether HTTP lets a response with `status` carry a body (not 1xx, 204, 205, 304)."""
    return status >= 200 and status not in (204, 205, 304)


def stored_answer(stored: StoredResponse, *, default_status: int, replayed: bool) -> HttpAnswer:
    """The same bytes for the first answer and every replay (both come from `stored`)."""
    status = stored.status_code or default_status
    headers = {REPLAYED_HEADER: "true"} if replayed else {}
    if not body_allowed(status):
        return HttpAnswer(status, headers)
    headers["Content-Type"] = JSON_MEDIA_TYPE
    return HttpAnswer(status, headers, render_json(stored.body))


# -- sync views (Flask, Django) -----------------------------------------------------------------

Respond = Callable[[], StoredResponse]
_pending: ContextVar[Respond | None] = ContextVar("writesafe_pending_view", default=None)


def _run_view(request: dict[str, Any]) -> StoredResponse:
    """The write of every guarded sync view: the view call its request left in this context.

    `request` (method, path, query and body) is what the operation is fingerprinted and audited by.
    """
    respond = _pending.get()
    if respond is None:
        raise RuntimeError(f"a guarded view runs only inside its HTTP request: {request['path']}")
    return respond()


class GuardedView:
    """The Idempotency-Key flow of one sync view, whatever its framework (a sync tool runs the
    view on the request's own thread).

    An `async def` view is refused here, when it is decorated, with a TypeError: the guard would
    have to run on the request's event loop, which WSGI servers make anew for each request (and a
    `WriteSafe` follows one loop at a time). Guard a plain `def` view, or use the FastAPI
    integration for async endpoints.
    """

    def __init__(
        self,
        ws: WriteSafe,
        view: Callable[..., Any],
        name: str | None,
        required: bool,
        lookup: Callable[[LookupOperation], LookupResult] | None,
        adapter: Adapter | None,
        refusal: Callable[[BaseException], Refusal | None],
        options: dict[str, Any],
    ) -> None:
        if inspect.iscoroutinefunction(view):
            raise TypeError(
                f"{view.__name__}: an async view cannot be guarded here; make it a plain def "
                "(it runs on the request's thread) or use idempotent_route (FastAPI)"
            )
        self.required = required
        self.tool = ws.tool(
            name or view.__name__,
            lookup=None if lookup is None else _sync_found_bodies(lookup),
            adapter=RefusalAdapter(adapter or DEFAULT_ADAPTER, refusal),
            **tool_options(options),
        )(_run_view)

    def answer(
        self,
        key_headers: list[str],
        payload: Callable[[], dict[str, Any]],
        respond: Respond,
        *,
        scope: str = DEFAULT_SCOPE,
        content_type: str | None = None,
        raw_body: bytes = b"",
    ) -> HttpAnswer | None:
        """The guarded answer to a request; None when it carries no key and needs none (the
        view then runs unguarded). A body `content_type` declares JSON that is not is refused
        here, before any operation exists (`malformed_json`)."""
        try:
            key = parse_idempotency_key(key_headers, required=self.required)
        except WriteSafeError as error:
            return problem_answer(error.envelope, status=MALFORMED_KEY_STATUS)
        if key is None:
            return None
        malformed = malformed_json(content_type, raw_body)
        if malformed is not None:
            return malformed
        token = _pending.set(respond)
        try:
            invocation = self.tool.invoke((payload(),), {}, key=key, scope=scope)
        except WriteSafeError as error:
            return problem_answer(error.envelope)
        finally:
            _pending.reset(token)
        return stored_answer(invocation.value, default_status=200, replayed=invocation.replayed)


def _sync_found_bodies(
    lookup: Callable[[LookupOperation], LookupResult],
) -> Callable[[LookupOperation], LookupResult]:
    def find(operation: LookupOperation) -> LookupResult:
        return stored_found(lookup(operation))

    return find
