"""Bearer API keys: who is calling, for which tenant scope, in which role.

A key sees only its own scope. Operations of other scopes answer 404 exactly like missing ones,
so a key cannot probe which keys another tenant uses. (No `from __future__ import annotations`:
FastAPI must resolve the dependencies' local `Annotated` aliases.)
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Response, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from writesafe.idempotency import MAX_KEY_LENGTH, WriteSafeError
from writesafe.ledger import ApiKeys, Role
from writesafe.service._api_keys import hash_token, well_formed
from writesafe.service._limits import Admission
from writesafe.service._problems import envelope_error, http_error
from writesafe.service._rate_limits import RateLimits, client_of
from writesafe.service._reads import read
from writesafe.service._work import TenantWork, request_cost

bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="wsk_<key id>_<secret>",
    description="An API key made with `writesafe keys create`; it fixes the tenant scope and role.",
)
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="writesafe"'}
_INVALID = {"WWW-Authenticate": 'Bearer realm="writesafe", error="invalid_token"'}


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller behind a valid key."""

    key_id: str
    name: str
    scope: str
    role: Role
    credential: str = field(repr=False)  # the key's hash: what `TenantWork` knows it by

    @property
    def actor(self) -> str:
        """How the caller is named in audit records (bounded like every name in the ledger)."""
        actor = f"api-key:{self.key_id} ({self.name})"
        return actor if len(actor) <= MAX_KEY_LENGTH else actor[: MAX_KEY_LENGTH - 2] + "…)"


class Authenticator:
    """The FastAPI dependency that turns `Authorization: Bearer …` into a `Principal`.

    A key's own budget is spent before its lookup, by what the request costs; the client's
    budget only when the request proves to have no valid key (`_rate_limits`). An API request
    whose tenant's bound on work is known to be full is refused before the lookup (`_work`).
    """

    def __init__(
        self,
        keys: ApiKeys,
        ready: Callable[[], Awaitable[None]],
        limits: RateLimits,
        work: TenantWork,
    ) -> None:
        self._keys = keys
        self._ready = ready  # an unmigrated ledger is reported as such, not as a missing table
        self._limits = limits
        self._work = work

    async def __call__(
        self,
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    ) -> Principal:
        admitted = request.scope.get(_ADMITTED)
        if isinstance(admitted, Principal):
            return admitted  # authenticated before its body was read (`admission`)
        client = client_of(request)
        if credentials is None:
            await self._limits.spend_anonymous(client)
            raise HTTPException(401, "an API key is required: Authorization: Bearer …", _CHALLENGE)
        token = credentials.credentials
        record = None
        if well_formed(token):
            secret_hash = hash_token(token)
            cost = request_cost(request)
            await self._limits.spend_key(secret_hash, cost)
            if _is_api(request):  # the console's pages do not hold the bound (`_app`)
                self._work.refuse_early(secret_hash, cost)
            await self._ready()
            async with self._limits.lookup_gate(client):
                record = await read("the API key lookup", lambda: self._keys.active(secret_hash))
        if record is None:
            await self._limits.spend_anonymous(client)
            raise HTTPException(401, "the API key is not valid or was revoked", _INVALID)
        return Principal(
            key_id=record.key_id,
            name=record.name,
            scope=record.scope,
            role=record.role,
            credential=secret_hash,
        )


_ADMITTED = "writesafe.principal"


def _is_api(request: Request) -> bool:
    """Whether `request` is the API's (`/v1/…`): what holds its tenant's bound on work."""
    return request.url.path.startswith("/v1/")


def admission(authenticate: Authenticator) -> Admission:
    """The API's callers authenticated on their headers, before their body is read: a refusal
    (401, 429) is answered at once, a `Principal` kept for the route's own dependency."""

    async def admit(request: Request) -> Response | None:
        if not _is_api(request):
            return None  # the console's forms carry their key or session in the body or a cookie
        try:
            request.scope[_ADMITTED] = await authenticate(request, await bearer(request))
        except HTTPException as error:
            return await http_error(request, error)
        except WriteSafeError as error:
            return await envelope_error(request, error)
        except Exception:  # a store that did not answer: the route answers for it (503)
            return None
        return None

    return admit


def require_operator(authenticate: Authenticator) -> Callable[..., Awaitable[Principal]]:
    """A dependency admitting operator and admin keys (403 for readers)."""
    return _require(authenticate, frozenset({Role.OPERATOR, Role.ADMIN}), "operator")


def require_admin(authenticate: Authenticator) -> Callable[..., Awaitable[Principal]]:
    """A dependency admitting only admin keys: deployment-wide actions span every tenant."""
    return _require(authenticate, frozenset({Role.ADMIN}), "admin")


def _require(
    authenticate: Authenticator, roles: frozenset[Role], needed: str
) -> Callable[..., Awaitable[Principal]]:
    async def admitted(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
        if principal.role not in roles:
            raise HTTPException(403, f"this needs an API key with the {needed} role")
        return principal

    return admitted


Caller = Callable[..., Awaitable[Principal]] | Callable[..., AsyncIterator[Principal]]
"""A dependency that yields the request's `Principal` (what the routers are given)."""


def within_tenant_bound(work: TenantWork, caller: Callable[..., Awaitable[Principal]]) -> Caller:
    """`caller`'s dependency, holding the request's cost of its tenant's bound on work in flight
    until the answer is sent (serializing a large page is most of its work)."""

    async def working(
        request: Request, principal: Annotated[Principal, Depends(caller)]
    ) -> AsyncIterator[Principal]:
        with work.slot(principal.scope, request_cost(request), principal.credential):
            yield principal

    return working
