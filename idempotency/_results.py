"""Results are stored as JSON and replayed as the type the tool declares, falsy values included.

The first caller gets what a replay decodes from the stored form, never the object the write
returned: JSON loses some things (NaN and infinities become null, sets become lists, dict keys
become strings, a result typed `Any` loses its classes), and every caller must get the same answer.
A result with no stored form at all, or one larger than the cap, is `ResultNotStored`.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

from writesafe.ledger import loads_json

DEFAULT_MAX_RESULT_BYTES = 1_048_576
"""The largest result the ledger stores (its JSON, in UTF-8 bytes): 1 MiB."""


class ResultNotStored(ValueError):
    """The write returned a result the ledger cannot keep. `evidence["reason"]` is
    `no_json_form` (nothing JSON can hold: an object of no known type, a lone surrogate, nesting
    deeper than the encoder goes) or `too_large` (its JSON is over the cap)."""

    def __init__(self, message: str, evidence: dict[str, Any]) -> None:
        super().__init__(message)
        self.evidence = evidence


class ResultCodec:
    """Encodes a tool's result for the ledger and decodes a stored one back to the declared type."""

    def __init__(
        self, function: Callable[..., Any], max_bytes: int = DEFAULT_MAX_RESULT_BYTES
    ) -> None:
        try:
            annotation = typing.get_type_hints(function).get("return", Any)
        except Exception:
            annotation = Any
        self._adapter: TypeAdapter[Any] = TypeAdapter(annotation)
        self._max_bytes = max_bytes

    def encode(self, result: Any) -> str:
        """The JSON text the ledger stores for `result`; raises `ResultNotStored`."""
        try:
            encoded = self._adapter.dump_json(result)
        except Exception as error:  # whatever a serializer raises, there is no stored form
            kind = type(result).__name__
            raise ResultNotStored(
                f"the result ({kind}) has no JSON form",
                {"reason": "no_json_form", "type": kind, "error": type(error).__name__},
            ) from None
        if len(encoded) > self._max_bytes:
            raise ResultNotStored(
                f"the result's JSON is {len(encoded)} bytes, over the {self._max_bytes}-byte cap",
                {"reason": "too_large", "bytes": len(encoded), "limit": self._max_bytes},
            )
        return encoded.decode()

    def normalise(self, result: Any) -> tuple[str, Any]:
        """The stored text of a write's result, and the answer every caller gets: what a replay
        decodes from that text. Raises `ResultNotStored`."""
        text = self.encode(result)
        return text, self.decode(text)

    def fit(self, result: Any) -> str:
        """JSON text of a result someone else vouches for (an operator's resolution): it must
        validate as the declared type, so every replay decodes it as an executed result would.
        Raises `ValueError` (pydantic's `ValidationError`) when it does not fit."""
        return self.encode(self._adapter.validate_python(result))

    def decode(self, text: str) -> Any:
        try:
            return self._adapter.validate_json(text)
        except ValueError:
            pass
        # The declared type changed since the result was stored, or the JSON nests deeper than
        # pydantic parses: replay the stored JSON as plain data, or as its text if even that fails.
        try:
            return loads_json(text)
        except (ValueError, RecursionError):
            return text
