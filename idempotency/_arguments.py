"""Binding a guarded call's arguments to what the tool declares, and the fingerprint that tells
two calls apart."""

from __future__ import annotations

import hashlib
import inspect
import re
import typing
from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError
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


@dataclass(frozen=True, slots=True)
class Parameters:
    """What a tool declares about its arguments, worked out once per tool.

    `plain`: the parameter names when all are positional-or-keyword (`bind`'s fast path);
    `adapters`: a validator per parameter with a declared type; `open`: the parameters whose
    declared type leaves values open (`Any`, none, bare `dict`/`list`), where only values JSON
    tells apart are accepted (`ambiguity`).
    """

    signature: inspect.Signature
    plain: tuple[str, ...] | None
    adapters: dict[str, TypeAdapter[Any]]
    open: frozenset[str]


def declared_parameters(function: Callable[..., Any], signature: inspect.Signature) -> Parameters:
    """The validators of `function`'s parameters (in `signature`), built from its annotations."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # unresolvable annotations: nothing to validate against
        hints = {}
    adapters: dict[str, TypeAdapter[Any]] = {}
    open_names: set[str] = set()
    for name, parameter in signature.parameters.items():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        annotation = hints.get(name, Any if parameter.annotation is parameter.empty else None)
        if annotation is None:
            continue
        if _leaves_open(annotation):
            open_names.add(name)
        if annotation not in _ANYTHING:
            adapters[name] = _adapter(annotation)
    return Parameters(signature, plain_parameters(signature), adapters, frozenset(open_names))


def plain_parameters(signature: inspect.Signature) -> tuple[str, ...] | None:
    """The parameter names of a signature whose parameters are all positional-or-keyword, in
    order; None for any other signature. A call of such a signature that passes every parameter
    positionally binds to exactly these names, with nothing to default (`bind`'s fast path)."""
    parameters = signature.parameters.values()
    if all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters):
        return tuple(signature.parameters)
    return None


def bind(parameters: Parameters, args: tuple[Any, ...], kwargs: dict[str, Any]) -> BoundCall:
    """Bind like Python would, validate against the declared types, then canonicalise.

    A call that passes each of `parameters.plain` positionally is bound without
    `Signature.bind` (a quarter of `Tool.prepare`'s instructions), to what it would have given:
    the same arguments, all positional. A missing or unexpected argument, a value that does not
    fit its declared type, one JSON could not tell from another under an open type, and
    unserialisable, NaN, too deep or too large arguments are the caller's input to fix: each is
    INPUT_INVALID naming the argument, before anything is recorded. The function receives the
    validated values (a declared model is given as the model, `"7"` for an `int` as 7).
    """
    plain = parameters.plain
    if plain is not None and not kwargs and len(args) == len(plain):
        arguments = dict(zip(plain, args, strict=True))
        if _validate(parameters, arguments):
            args = tuple(arguments.values())
    else:
        try:
            bound = parameters.signature.bind(*args, **kwargs)
        except TypeError as error:
            raise invalid_input(_named(error), f"the call does not fit the tool: {error}") from None
        bound.apply_defaults()
        _validate(parameters, bound.arguments)  # in place: `bound.args`/`kwargs` read it
        args, kwargs = bound.args, bound.kwargs
        arguments = dict(bound.arguments)
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


def _validate(parameters: Parameters, arguments: dict[str, Any]) -> bool:
    """Validate `arguments` in place against the declared types; True if any value changed."""
    changed = False
    for name, value in arguments.items():
        adapter = parameters.adapters.get(name)
        if adapter is not None:
            try:
                fitted = adapter.validate_python(value)
            except ValidationError as error:
                problem = error.errors()[0]
                where = ".".join([name, *(str(part) for part in problem["loc"])])
                raise invalid_input(where, f"{where}: {problem['msg']}") from None
            if fitted is not value:
                arguments[name] = fitted
                changed = True
        if name in parameters.open:
            found = ambiguity(arguments[name], name)
            if found is not None:
                where, kind = found
                message = (
                    f"{where}: a {kind} has the same JSON as another value; pass it as plain "
                    "JSON data (a list, a string, a number) or declare the parameter's type"
                )
                raise invalid_input(where, message)
    return changed


def ambiguity(value: Any, where: str, depth: int = 0) -> tuple[str, str] | None:
    """Where, under an open type, `value` holds something JSON spells like another value (a set
    like a list, bytes or a Decimal like a string, an integer dict key like a string one, a
    datetime, an enum, a model like its fields), and what it is; None when it is plain JSON
    data (tuples are lists: the canonical form of a tuple is the list it spells)."""
    kind = type(value)
    if kind in _JSON_SCALARS:
        return None
    if depth > _MAX_DEPTH:
        return None  # canonical_json refuses what nests this deep
    if kind is list or kind is tuple:
        for index, member in enumerate(value):
            found = ambiguity(member, f"{where}.{index}", depth + 1)
            if found is not None:
                return found
        return None
    if kind is dict:
        for name, member in value.items():
            if type(name) is not str:
                return f"{where}.{name}", f"{type(name).__name__} key"
            found = ambiguity(member, f"{where}.{name}", depth + 1)
            if found is not None:
                return found
        return None
    return where, kind.__name__


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
_MAX_DEPTH = 256
_ANYTHING: tuple[Any, ...] = (Any, object)
_OPEN_CONTAINERS = (dict, list, Mapping, Sequence, MutableMapping, MutableSequence)


def _leaves_open(annotation: Any) -> bool:
    """True for a declared type under which JSON-alike values would pass unchanged."""
    if annotation in _ANYTHING:
        return True
    origin = typing.get_origin(annotation) or annotation
    if origin not in _OPEN_CONTAINERS:
        return False
    return any(argument in _ANYTHING for argument in typing.get_args(annotation)) or not (
        typing.get_args(annotation)
    )


def _adapter(annotation: Any) -> TypeAdapter[Any]:
    try:
        return TypeAdapter(annotation, config=_ARBITRARY)
    except Exception:  # a model or dataclass carries its own config, and pydantic refuses ours
        return TypeAdapter(annotation)


_ARBITRARY = ConfigDict(arbitrary_types_allowed=True)


def _named(error: TypeError) -> str:
    """The argument a binding error names (`missing a required argument: 'sku'`), else
    `arguments` (too many positional arguments)."""
    quoted = re.search(r"'([^']+)'", str(error))
    return quoted.group(1) if quoted else "arguments"


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
