"""Binding a guarded call's arguments, and the fingerprint that tells two calls apart."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_core import PydanticSerializationError

from writesafe.idempotency._errors import invalid_input
from writesafe.ledger import canonical_json

MAX_ARGUMENTS_BYTES = 1 << 20
KEY_PARAMETER = "idempotency_key"


@dataclass(frozen=True, slots=True)
class BoundCall:
    """The call as the function will receive it, and its canonical JSON for the ledger."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    arguments: dict[str, Any]
    arguments_json: str


def plain_parameters(signature: inspect.Signature) -> tuple[str, ...] | None:
    """The parameter names of a signature whose parameters are all positional-or-keyword, in
    order; None for any other signature. A call of such a signature that passes every parameter
    positionally binds to exactly these names, with nothing to default (`bind`'s fast path)."""
    parameters = signature.parameters.values()
    if all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters):
        return tuple(signature.parameters)
    return None


def bind(
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    plain: tuple[str, ...] | None = None,
) -> BoundCall:
    """Bind like Python would (a TypeError for a wrong call), then canonicalise for storage.

    `plain`: `plain_parameters(signature)`. A call that passes each of those positionally is
    bound without `Signature.bind` (a quarter of `Tool.prepare`'s instructions), to what it would
    have given: the same arguments, all positional. Unserialisable, NaN, too deep or too
    large arguments are the caller's input to fix.
    """
    if plain is not None and not kwargs and len(args) == len(plain):
        arguments = dict(zip(plain, args, strict=True))
    else:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        args, kwargs = bound.args, bound.kwargs
        arguments = bound.arguments
    arguments = {k: v for k, v in arguments.items() if k != KEY_PARAMETER}
    try:
        text = canonical_json(arguments)
        size = len(text.encode())  # a lone surrogate has no UTF-8 form: UnicodeEncodeError
    except (PydanticSerializationError, ValueError, TypeError, RecursionError) as error:
        message = f"arguments have no JSON form: {type(error).__name__}"
        raise invalid_input("arguments", message) from None
    if size > MAX_ARGUMENTS_BYTES:
        raise invalid_input("arguments", "arguments exceed 1 MiB of JSON")
    return BoundCall(args, kwargs, arguments, text)


def fingerprint(tool: str, arguments_json: str) -> str:
    """sha256 of the tool name and the canonical arguments: key order never matters."""
    return hashlib.sha256(f"{tool}\x00{arguments_json}".encode()).hexdigest()


def auth_hash(auth_context: object) -> str | None:
    """A hash of the caller's auth context, so a renewal is evidence without storing a secret."""
    if auth_context is None:
        return None
    try:
        encoded = canonical_json(auth_context).encode()
    except (PydanticSerializationError, ValueError, TypeError, RecursionError):
        raise invalid_input("auth_context", "auth_context has no JSON form") from None
    return hashlib.sha256(encoded).hexdigest()


def derive_key(key_function: Callable[..., object], call: BoundCall) -> object:
    """The tool's `key=` function applied to the call; its failure is the caller's input to fix."""
    try:
        return key_function(*call.args, **call.kwargs)
    except Exception as error:
        message = f"the key function failed: {type(error).__name__}: {error}"
        raise invalid_input("idempotency_key", message) from error
