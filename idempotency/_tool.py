"""A guarded tool: the user's async write, callable with an idempotency key."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from idempotency._arguments import auth_hash, bind, derive_key, fingerprint
from idempotency._errors import invalid_input
from idempotency._keys import DEFAULT_SCOPE, validate_key
from idempotency._spec import GuardedCall, ToolSpec

if TYPE_CHECKING:
    from idempotency._writesafe import WriteSafe

R = TypeVar("R")


class Tool(Generic[R]):
    """Call it like the wrapped function, plus `idempotency_key=`, `scope=` and `auth_context=`."""

    def __init__(self, owner: WriteSafe, spec: ToolSpec) -> None:
        self._owner = owner
        self.spec = spec
        functools.update_wrapper(self, spec.function)

    @property
    def name(self) -> str:
        return self.spec.name

    async def __call__(
        self,
        *args: Any,
        idempotency_key: str | None = None,
        scope: str = DEFAULT_SCOPE,
        auth_context: object = None,
        **kwargs: Any,
    ) -> R:
        guard = await self._owner.guard()
        call = self.prepare(args, kwargs, idempotency_key, scope, auth_context)
        result: R = await guard.call(call)
        return result

    def prepare(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        idempotency_key: str | None,
        scope: str,
        auth_context: object,
    ) -> GuardedCall:
        """Validate and fingerprint a call without running it."""
        bound = bind(self.spec.signature, args, kwargs)
        key: object = idempotency_key
        if key is None and self.spec.key_function is not None:
            key = derive_key(self.spec.key_function, bound)
        if key is None:
            raise invalid_input(
                "idempotency_key",
                f"{self.name} needs idempotency_key= (or a key= function on the tool)",
            )
        return GuardedCall(
            tool=self.spec,
            scope=validate_key(scope, "scope"),
            key=validate_key(key),
            bound=bound,
            fingerprint=fingerprint(self.spec.name, bound.arguments_json),
            auth_hash=auth_hash(auth_context),
        )


ToolFunction = Callable[..., Awaitable[R]]
