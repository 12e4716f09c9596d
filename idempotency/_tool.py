"""A guarded tool: the user's async write, callable with an idempotency key."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from writesafe.idempotency._arguments import auth_hash, bind, derive_key, fingerprint
from writesafe.idempotency._errors import invalid_input
from writesafe.idempotency._keys import DEFAULT_SCOPE, validate_key
from writesafe.idempotency._spec import GuardedCall, ToolSpec

if TYPE_CHECKING:
    from writesafe.idempotency._guard import Look
    from writesafe.idempotency._writesafe import WriteSafe

R = TypeVar("R")

DERIVED_KEY_PREFIX = "call:"


@dataclass(frozen=True, slots=True)
class Invocation(Generic[R]):
    """What one guarded call answered: the result, and whether an earlier execution's result was
    replayed instead of executing the write in this call."""

    value: R
    replayed: bool
    key: str


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
        result: R
        result, _ = await guard.run(call)
        return result

    async def invoke(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        key: str | None,
        scope: str = DEFAULT_SCOPE,
        auth_context: object = None,
        key_from_arguments: bool = False,
        through: WriteSafe | None = None,
    ) -> Invocation[R]:
        """Like calling the tool, for integrations that must tell their caller about replays.

        `key_from_arguments`: without a key (and without a `key=` function), use the call's own
        fingerprint, so identical calls are one operation (see `prepare`). `through`: the
        `WriteSafe` whose stores run the call (default: the tool's own; the sync facade passes
        its twin, which serves another event loop).
        """
        await (through or self._owner).guard()  # an unreachable ledger is told before bad input
        call = self.prepare(args, kwargs, key, scope, auth_context, key_from_arguments)
        return await self.run(call, through=through)

    async def run(
        self, call: GuardedCall, *, through: WriteSafe | None = None, look: Look | None = None
    ) -> Invocation[R]:
        """Run a call `prepare` made (the sync face prepares on the calling thread, and makes
        the call's first `look` there)."""
        guard = await (through or self._owner).guard()
        value, replayed = await guard.run(call, look)
        return Invocation(value, replayed, call.key)

    def prepare(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        idempotency_key: str | None,
        scope: str,
        auth_context: object,
        key_from_arguments: bool = False,
    ) -> GuardedCall:
        """Validate and fingerprint a call without running it.

        The key is `idempotency_key`, else the tool's `key=` function of the arguments, else (with
        `key_from_arguments`, or for a read-only tool, which needs none) `call:` + the fingerprint
        of the tool name and canonical arguments.
        """
        bound = bind(self.spec.parameters, args, kwargs)
        digest = fingerprint(self.spec.name, bound.arguments_json)
        key: object = idempotency_key
        if key is None and self.spec.key_function is not None:
            key = derive_key(self.spec.key_function, bound)
        if key is None and (key_from_arguments or self.spec.read_only):
            key = DERIVED_KEY_PREFIX + digest
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
            fingerprint=digest,
            auth_hash=auth_hash(auth_context),
        )
