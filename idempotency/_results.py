"""Results are stored as JSON and replayed as the type the tool declares, falsy values included."""

from __future__ import annotations

import logging
import typing
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter
from pydantic_core import PydanticSerializationError

from ledger import dumps_json, loads_json

logger = logging.getLogger("writesafe")


class ResultCodec:
    """Encodes a tool's result for the ledger and decodes a stored one back to the declared type."""

    def __init__(self, function: Callable[..., Any]) -> None:
        try:
            annotation = typing.get_type_hints(function).get("return", Any)
        except Exception:
            annotation = Any
        self._adapter: TypeAdapter[Any] = TypeAdapter(annotation)

    def encode(self, result: Any) -> str:
        """JSON text of `result`. A value with no JSON form is stored by its string form, with a
        warning: the effect happened, so losing fidelity on replay beats losing the record."""
        try:
            return self._adapter.dump_json(result).decode()
        except PydanticSerializationError:
            logger.warning(
                "result of type %s has no JSON form; stored as text", type(result).__name__
            )
        try:
            return self._adapter.dump_json(result, fallback=str, warnings=False).decode()
        except Exception:
            # Not even its text can be stored (a lone surrogate, undecodable bytes, nesting deeper
            # than the serializer goes, a failing __str__): record that the write returned one.
            return dumps_json(f"<unstorable {type(result).__name__}>")

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
