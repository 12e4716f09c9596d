"""`/console`: the operator console, HTML rendered on the server over the API's own logic.

Plain Jinja2 templates and one hand-written stylesheet, packaged with the service: no JavaScript,
no build step, nothing fetched at run time, and autoescaping for every value (evidence and
results are other systems' text). The pages call what the API calls (`list_page`, `find`,
`resolve`, the authenticator and the operator check), so the console cannot drift from the API's
rules: one tenant's key sees one tenant, and only operators resolve.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import jinja2
from fastapi import APIRouter, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from writesafe.ledger import Status
from writesafe.reconciler import ErrorEnvelope, OperationSummary
from writesafe.reconciler._resolve import RESOLVABLE
from writesafe.service._auth import Principal
from writesafe.service._console_chart import first_hour, hourly_chart
from writesafe.service._console_session import (
    close_session,
    csrf_token,
    open_session,
    same_origin,
    session_token,
    valid_csrf,
)
from writesafe.service._context import ServiceContext
from writesafe.service._models import ListQuery, ResolveRequest
from writesafe.service._operations import find, list_page, resolve

# The service's authenticator: it rate-limits by the request as well as checking the key.
Authenticate = Callable[[Request, HTTPAuthorizationCredentials | None], Awaitable[Principal]]
Check = Callable[[Principal], Awaitable[Principal]]

ATTENTION_LIMIT = 50
AGES = {"": "any age", "300": "5 min", "3600": "1 hour", "86400": "1 day", "604800": "1 week"}
_RESOLUTION = TypeAdapter[Any](ResolveRequest)
_HEADERS = {
    # Nothing but this origin's stylesheet and forms; the pages hold one tenant's data.
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "Cache-Control": "no-store",
    # Not no-referrer: with it, browsers send `Origin: null` on the console's own form posts.
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
_STYLESHEET = resources.files("writesafe.service").joinpath("static/console/console.css")


def console_router(ctx: ServiceContext, authenticate: Authenticate, operator: Check) -> APIRouter:
    router = APIRouter(prefix="/console", include_in_schema=False)
    pages = _Pages(ctx)

    async def principal(request: Request) -> tuple[str, Principal] | None:
        token = session_token(request)
        if token is None:
            return None
        try:
            caller = await authenticate(
                request, HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
            )
        except HTTPException:
            return None  # unknown or revoked since the login
        return token, caller

    async def may_resolve(caller: Principal) -> bool:
        try:
            await operator(caller)
        except HTTPException:
            return False
        return True

    async def session(request: Request) -> _Session | Response:
        """The page's session, or the way to the login form."""
        found = await principal(request)
        if found is None:
            response = RedirectResponse("/console/login", status_code=303)
            close_session(response)
            return response
        token, caller = found
        return _Session(caller, await may_resolve(caller), token)

    @router.get("")
    async def home() -> Response:
        return RedirectResponse("/console/", status_code=303)

    @router.get("/login")
    async def login_form(request: Request) -> Response:
        if await principal(request) is not None:
            return RedirectResponse("/console/", status_code=303)
        return pages.render(request, "login.html", {})

    @router.post("/login")
    async def login(request: Request) -> Response:
        if not same_origin(request):
            return pages.refuse(request, 403, "this form can only be sent from the console itself")
        token = _text(await request.form(), "api_key").strip()
        try:
            credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
            await authenticate(request, credentials)
        except HTTPException:
            failed = {"error": "That API key is not valid or was revoked."}
            return pages.render(request, "login.html", failed, status=401)
        response = RedirectResponse("/console/", status_code=303)
        open_session(response, request, token)
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        token = session_token(request)
        form = await request.form()
        if token is None or not same_origin(request) or not valid_csrf(token, _text(form, "csrf")):
            return pages.refuse(request, 403, "the form expired; reload the page and try again")
        response = RedirectResponse("/console/login", status_code=303)
        close_session(response)
        return response

    @router.get("/static/console.css")
    async def stylesheet() -> Response:
        return Response(
            _STYLESHEET.read_text(),
            media_type="text/css",
            headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"},
        )

    @router.get("/")
    async def attention(request: Request) -> Response:
        """What needs a person first, and the last day's operations by status per hour."""
        opened = await session(request)
        if isinstance(opened, Response):
            return opened
        scope = opened.caller.scope
        queues = {
            status: await list_page(ctx, scope, ListQuery(status=[status], limit=ATTENTION_LIMIT))
            for status in (Status.NEEDS_ATTENTION, Status.OUTCOME_UNKNOWN)
        }
        now = await ctx.ws.ledger.now()
        expired = await ctx.ws.ledger.list(
            statuses=[Status.IN_FLIGHT],
            scope=scope,
            lease_expired_at=now,
            limit=ATTENTION_LIMIT + 1,
        )
        chart = hourly_chart(
            await ctx.ws.ledger.count_by_hour(scope=scope, since=first_hour(now)), now
        )
        return pages.render(
            request,
            "attention.html",
            {
                "session": opened,
                "now": now,
                "queues": queues,
                "expired": [OperationSummary.from_record(r) for r in expired[:ATTENTION_LIMIT]],
                "expired_more": len(expired) > ATTENTION_LIMIT,
                "chart": chart,
            },
        )

    @router.get("/operations")
    async def operations(request: Request) -> Response:
        """Operations by status, tool and age, a page at a time."""
        opened = await session(request)
        if isinstance(opened, Response):
            return opened
        params = request.query_params
        filters: dict[str, Any] = {
            "status": params.getlist("status") or None,
            "tool": params.get("tool") or None,
            "older_than": params.get("older_than") or None,
            "cursor": params.get("cursor") or None,
        }
        context: dict[str, Any] = {
            "session": opened,
            "now": await ctx.ws.ledger.now(),
            "filters": filters,
            "tools": sorted({*ctx.ws.tools, *([filters["tool"]] if filters["tool"] else [])}),
            "ages": AGES,
            "statuses": list(Status),
        }
        try:
            query = ListQuery.model_validate({k: v for k, v in filters.items() if v is not None})
        except ValidationError as error:
            context["error"] = _first_problem(error)
            return pages.render(request, "operations.html", context, status=422)
        context["page"] = await list_page(ctx, opened.caller.scope, query)
        context["next_query"] = _next_query(filters, context["page"].next_cursor)
        return pages.render(request, "operations.html", context)

    @router.get("/operations/{key:path}")
    async def operation(request: Request, key: str) -> Response:
        """One operation's timeline: every attempt and lookup, its evidence and envelope."""
        opened = await session(request)
        if isinstance(opened, Response):
            return opened
        return await pages.timeline(request, opened, key)

    @router.post("/operations/{key:path}")
    async def resolve_form(request: Request, key: str) -> Response:
        """An operator's verdict from the timeline's form; back to the timeline when recorded."""
        opened = await session(request)
        if isinstance(opened, Response):
            return opened
        form = await request.form()
        if not same_origin(request) or not opened.accepts(form):
            return pages.refuse(request, 403, "the form expired; reload the page and try again")
        if not opened.may_resolve:
            return pages.refuse(request, 403, "resolving needs an API key with the operator role")
        try:
            body = _RESOLUTION.validate_python(_resolution(form))
            await resolve(ctx, key, opened.caller, body)
        except (ValueError, ValidationError) as error:
            problem = _first_problem(error) if isinstance(error, ValidationError) else str(error)
            return await pages.timeline(request, opened, key, form=form, error=problem, status=422)
        except HTTPException as error:
            detail = str(error.detail)
            return await pages.timeline(
                request, opened, key, form=form, error=detail, status=error.status_code
            )
        return RedirectResponse(request.url.path, status_code=303)

    return router


@dataclass(frozen=True, slots=True)
class _Session:
    """A console page's caller, checked on this request."""

    caller: Principal
    may_resolve: bool
    token: str = field(repr=False)  # the session's API key: never rendered

    @property
    def csrf(self) -> str:
        return csrf_token(self.token)

    def accepts(self, form: FormData) -> bool:
        """A state-changing form of this session, sent from the console itself."""
        return valid_csrf(self.token, _text(form, "csrf"))


class _Pages:
    """The console's templates, rendered with its filters and security headers."""

    def __init__(self, ctx: ServiceContext) -> None:
        self._ctx = ctx
        self._env = jinja2.Environment(
            loader=jinja2.PackageLoader("writesafe.service", "templates/console"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,  # a misspelt name fails the page, not silently
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters["pretty"] = _pretty
        self._env.filters["when"] = _when
        self._env.globals["age"] = _age
        self._env.globals["resolvable"] = RESOLVABLE

    def render(
        self, request: Request, template: str, context: Mapping[str, Any], status: int = 200
    ) -> HTMLResponse:
        html = self._env.get_template(template).render(
            {"session": None, "path": request.url.path, **context}
        )
        return HTMLResponse(html, status_code=status, headers=_HEADERS)

    def refuse(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.render(request, "error.html", {"message": message}, status=status)

    async def timeline(
        self,
        request: Request,
        opened: _Session,
        key: str,
        *,
        form: FormData | None = None,
        error: str | None = None,
        status: int = 200,
    ) -> HTMLResponse:
        try:
            found = await find(self._ctx.ws, key, opened.caller.scope)
        except HTTPException as missing:
            context = {"session": opened, "message": str(missing.detail)}
            return self.render(request, "error.html", context, status=missing.status_code)
        context = {
            "session": opened,
            "now": await self._ctx.ws.ledger.now(),
            "op": found,
            "form": {name: _text(form, name) for name in _FORM_FIELDS},
            "error": error,
        }
        return self.render(request, "operation.html", context, status=status)


_FORM_FIELDS = ("outcome", "reason", "result", "evidence")


def _resolution(form: FormData) -> dict[str, Any]:
    """The resolve form as the API's request body; JSON fields are parsed, empty ones left out."""
    body: dict[str, Any] = {"outcome": _text(form, "outcome"), "reason": _text(form, "reason")}
    for name in ("result", "evidence"):
        text = _text(form, name).strip()
        if text:
            try:
                body[name] = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"{name} is not JSON: {error.msg}") from None
    return body


def _text(form: FormData | None, name: str) -> str:
    value = None if form is None else form.get(name)
    return value if isinstance(value, str) else ""


def _first_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"] if not isinstance(part, int))
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def _next_query(filters: Mapping[str, Any], cursor: str | None) -> str | None:
    """The query string of the next page: the same filters, the next cursor."""
    if cursor is None:
        return None
    pairs = [("status", s) for s in filters["status"] or []]
    pairs += [(k, filters[k]) for k in ("tool", "older_than") if filters[k]]
    return urlencode([*pairs, ("cursor", cursor)])


def _pretty(value: Any) -> str:
    """JSON for people: indented, keys sorted; an envelope as the contract spells it."""
    plain = value.to_json_dict() if isinstance(value, ErrorEnvelope) else value
    return json.dumps(plain, indent=2, sort_keys=True, ensure_ascii=False)


def _when(moment: datetime | None) -> str:
    return "—" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S}Z"


def _age(moment: datetime | None, now: datetime) -> str:
    """How long ago, in the largest unit that fits (future moments say "in …")."""
    if moment is None:
        return "—"
    seconds = (now - moment) / timedelta(seconds=1)
    ahead, seconds = seconds < 0, abs(seconds)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            amount = f"{int(seconds // size)} {unit}"
            break
    else:
        amount = f"{int(seconds)} s"
    return f"in {amount}" if ahead else f"{amount} ago"
