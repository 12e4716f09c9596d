"""The console's session and its CSRF defences.

The console is opened with the API keys the API takes. The login form posts the key once; an
HttpOnly, SameSite=Strict cookie then carries it to every console request, where it is checked
exactly like a Bearer header. So a revoked key ends its console sessions at once, and no
server-side session store or signing secret has to be shared between replicas. The cookie is
HttpOnly (no script reads it), SameSite=Strict (another site's pages never send it), Secure on
https, scoped to `/console`, and ends with the browser session. No key ever appears in a URL.

Forms are CSRF-safe on three counts: a POST another origin made (`Sec-Fetch-Site`, `Origin`) is
refused first, which covers the login form too (login CSRF); SameSite=Strict keeps the cookie off
cross-site requests; and every state-changing form carries a token derived from the session's key
(an HMAC), which a page of another origin can neither read nor compute.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

COOKIE = "writesafe_console"
PATH = "/console"
_CSRF_PURPOSE = b"writesafe-console-csrf/1"
_SAME_SITE_FETCHES = frozenset({"same-origin", "none"})


def session_token(request: Request) -> str | None:
    """The API key the session was opened with, if any (not yet checked)."""
    return request.cookies.get(COOKIE) or None


def open_session(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def close_session(response: Response) -> None:
    response.delete_cookie(COOKIE, path=PATH, httponly=True, samesite="strict")


def csrf_token(token: str) -> str:
    """The form token of a session: only a page that could read the session's key can know it."""
    return hmac.new(token.encode(), _CSRF_PURPOSE, hashlib.sha256).hexdigest()


def valid_csrf(token: str, submitted: str) -> bool:
    return hmac.compare_digest(csrf_token(token), submitted)


def same_origin(request: Request) -> bool:
    """False for a request a page of another origin made (browsers say so in these headers)."""
    if request.headers.get("sec-fetch-site", "same-origin") not in _SAME_SITE_FETCHES:
        return False
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")
