"""Results checked against the type the tool declares, stored as JSON, replayed as that type.

One rule (`ResultCodec.check`) judges a result at every door it comes through: a write's return
value, a lookup's `Found`, an operator's resolution, and (`decode`) a stored record read back. A
value that does not fit the return annotation is `ResultMisfit`, never a success.

The first caller gets what a replay decodes from the stored form, never the object the write
returned: JSON loses some things (sets become lists, dict keys become strings, a result typed
`Any` loses its classes), and every caller must get the same answer. What JSON cannot hold at all
(an object of no known type, NaN or an infinity, which it would silently turn into null) or a
result larger than the cap is `ResultNotStored`: refused, never changed.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from writesafe.ledger import loads_json
from writesafe.reconciler._misfit import ResultMisfit

DEFAULT_MAX_RESULT_BYTES = 1_048_576
"""The largest result the ledger stores (its JSON, in UTF-8 bytes): 1 MiB."""

_NULL = b"null"  # where pydantic writes a NaN or an infinity, which JSON has no number for


class ResultNotStored(ValueError):
    """The write returned a result the ledger cannot keep. `evidence["reason"]` is
    `no_json_form` (nothing JSON can hold: an object of no known type, a lone surrogate, nesting
    deeper than the encoder goes), `not_finite` (NaN or an infinity, which JSON has no number
    for) or `too_large` (its JSON is over the cap)."""

    def __init__(self, message: str, evidence: dict[str, Any]) -> None:
        super().__init__(message)
        self.evidence = evidence


class ResultCodec:
    """Checks a tool's result against its return annotation, encodes it for the ledger, and
    decodes a stored one back to the declared type."""

    def __init__(
        self, function: Callable[..., Any], max_bytes: int = DEFAULT_MAX_RESULT_BYTES
    ) -> None:
        try:
            annotation = typing.get_type_hints(function).get("return", Any)
        except Exception:
            annotation = Any
        self._declared = annotation is not Any
        self._adapter: TypeAdapter[Any] = TypeAdapter(annotation)
        self._max_bytes = max_bytes

    def check(self, result: Any) -> str:
        """The one rule for a result at any door: the JSON text the ledger stores for `result`,
        once it validates as the declared type. Raises `ResultMisfit` when it does not fit,
        `ResultNotStored` when it fits but JSON cannot hold it."""
        try:
            fitted = self._adapter.validate_python(result) if self._declared else result
        except ValidationError as error:
            raise ResultMisfit(result, _problems(error)) from None
        return self._encode(fitted, result)

    def normalise(self, result: Any) -> tuple[str, Any]:
        """The stored text of a write's result, and the answer every caller gets: what a replay
        decodes from that text. Raises `ResultMisfit` or `ResultNotStored`."""
        text = self.check(result)
        return text, self.decode(text)

    def decode(self, text: str) -> Any:
        """A stored result as the declared type; `ResultMisfit` when it no longer fits (the
        declared type changed since it was stored)."""
        try:
            return self._adapter.validate_json(text)
        except ValidationError as error:
            if self._declared:
                raise ResultMisfit(_plain(text), _problems(error)) from None
        # Typed `Any`, and nested deeper than pydantic parses: the stored JSON as plain data.
        return _plain(text)

    def _encode(self, fitted: Any, result: Any) -> str:
        kind = type(result).__name__
        try:
            encoded = self._adapter.dump_json(fitted, warnings=False)
        except Exception as error:  # whatever a serializer raises, there is no stored form
            raise ResultNotStored(
                f"the result ({kind}) has no JSON form",
                {"reason": "no_json_form", "type": kind, "error": type(error).__name__},
            ) from None
        if len(encoded) > self._max_bytes:
            raise ResultNotStored(
                f"the result's JSON is {len(encoded)} bytes, over the {self._max_bytes}-byte cap",
                {"reason": "too_large", "bytes": len(encoded), "limit": self._max_bytes},
            )
        if _NULL in encoded and _non_finite(fitted):
            raise ResultNotStored(
                "the result holds NaN or an infinity, which JSON has no number for",
                {"reason": "not_finite", "type": kind},
            )
        return encoded.decode()


def _non_finite(value: Any) -> bool:
    """True when `value` holds a NaN or an infinity anywhere (models and dataclasses included):
    pydantic would store it as null. Called only for JSON that has a null in it."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(member) for member in value.values())
    if isinstance(value, list | tuple | set | frozenset):
        return any(_non_finite(member) for member in value)
    if isinstance(value, BaseModel):
        return any(_non_finite(member) for member in vars(value).values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_non_finite(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def _plain(text: str) -> Any:
    try:
        return loads_json(text)
    except (ValueError, RecursionError):
        return text


def _problems(error: ValidationError) -> list[tuple[str, str]]:
    return [(".".join(str(part) for part in e["loc"]), e["msg"]) for e in error.errors()[:3]]
