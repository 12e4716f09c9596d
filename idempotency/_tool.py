"""A guarded tool: the user's async write, called with its own arguments after a key."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from typing_extensions import ParamSpec

from writesafe.idempotency._arguments import (
    KEY_PARAMETER,
    auth_hash,
    bind,
    derive_key,
    fingerprint,
)
from writesafe.idempotency._errors import invalid_input
from writesafe.idempotency._keys import DEFAULT_SCOPE, validate_key
from writesafe.idempotency._spec import GuardedCall, ToolSpec

if TYPE_CHECKING:
    from writesafe.idempotency._guard import Look
    from writesafe.idempotency._writesafe import WriteSafe

R = TypeVar("R")
# The wrapped function's parameters. Its default, `...` (any call), keeps `Tool[R]` meaning
# what it did before tools kept their parameters: a tool of any signature returning R.
P = ParamSpec("P", default=...)

DERIVED_KEY_PREFIX = "call:"


@dataclass(frozen=True, slots=True)
class CallOptions:
    """What the guard takes besides the function's arguments: the key (None: the tool's `key=`
    function, or none for a read-only tool), the scope, and the caller's auth context."""

    key: str | None = None
    scope: str = DEFAULT_SCOPE
    auth_context: object = None


def split_options(
    spec: ToolSpec, kwargs: dict[str, Any], options: CallOptions | None = None
) -> tuple[CallOptions, dict[str, Any]]:
    """The guard's options and the function's own keyword arguments of one call.

    A function that declares `idempotency_key` takes its key as that argument, so the type
    checker sees it there. Without `options` (a call with no `.key(...)` before it), the
    keywords of the call form before `.key` (`idempotency_key=`, `scope=`, `auth_context=`)
    are still taken at run time, where the function has no parameter of that name; the type
    checker, seeing only the function's parameters, rejects them.
    """
    rest = dict(kwargs)
    passed = rest.pop(KEY_PARAMETER, None)
    if options is None:
        named = spec.signature.parameters
        scope = DEFAULT_SCOPE if "scope" in named else rest.pop("scope", DEFAULT_SCOPE)
        auth_context = None if "auth_context" in named else rest.pop("auth_context", None)
        return CallOptions(passed, scope, auth_context), rest
    if passed is None or passed == options.key:
        return options, rest
    if options.key is not None:
        raise invalid_input(KEY_PARAMETER, "the key is given twice, with two values")
    return CallOptions(passed, options.scope, options.auth_context), rest


@dataclass(frozen=True, slots=True)
class Invocation(Generic[R]):
    """What one guarded call answered: the result, and whether an earlier execution's result was
    replayed instead of executing the write in this call."""

    value: R
    replayed: bool
    key: str


class Tool(Generic[R, P]):
    """A guarded `async def`: `await tool.key("ord-7", scope="tenant-a")(order)`.

    The key comes first, in `.key(...)`, and the call after it takes exactly the function's
    parameters, so a type checker checks the payload against them and a misspelt option is an
    error of `.key`. (PEP 612 cannot add keyword parameters to a function's own, so the key
    cannot be one more keyword of the call and stay typed.) A tool with a `key=` function, or a
    read-only one, is called directly: `await tool(order)`.
    """

    def __init__(self, owner: WriteSafe, spec: ToolSpec) -> None:
        self._owner = owner
        self.spec = spec
        functools.update_wrapper(self, spec.function)

    @property
    def name(self) -> str:
        return self.spec.name

    def key(
        self,
        key: str | None = None,
        /,
        *,
        scope: str = DEFAULT_SCOPE,
        auth_context: object = None,
    ) -> KeyedTool[R, P]:
        """This tool under `key` in `scope`; `auth_context` (e.g. the caller's token) must match
        on a replay. Call what it returns with the function's arguments."""
        return KeyedTool(self, CallOptions(key, scope, auth_context))

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        options, rest = split_options(self.spec, kwargs)
        return await self.call(options, args, rest)

    async def call(self, options: CallOptions, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        """Run one call with the function's own keyword arguments in `kwargs`."""
        guard = await self._owner.guard()
        call = self.prepare(args, kwargs, options.key, options.scope, options.auth_context)
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


class KeyedTool(Generic[R, P]):
    """A tool with its key, scope and auth context chosen (`Tool.key`): await a call of it with
    the function's arguments. It holds no state of a call, so it may be called again (the same
    key: a replay, or the check that the arguments are the same)."""

    __slots__ = ("_options", "_tool")

    def __init__(self, tool: Tool[R, P], options: CallOptions) -> None:
        self._tool = tool
        self._options = options

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        options, rest = split_options(self._tool.spec, kwargs, self._options)
        return await self._tool.call(options, args, rest)
