"""Adapters turn whatever a write raised into an envelope; the default knows only exceptions."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from reconciler._classify import Classification, classify_exception
from reconciler._contract import CodeRegistry


@runtime_checkable
class Adapter(Protocol):
    """Maps a failure of a write to the contract. Adapters are versioned: a pairing is a release."""

    name: str
    version: str

    def classify(self, error: BaseException, codes: CodeRegistry) -> Classification:
        """Classify `error`; must never raise and must fail closed to UNKNOWN_ERROR."""
        ...


class ExceptionAdapter:
    """The built-in adapter: network and asyncio exceptions by whether anything was sent."""

    name = "exceptions"
    version = "1"

    def classify(self, error: BaseException, codes: CodeRegistry) -> Classification:
        return classify_exception(error, codes)


DEFAULT_ADAPTER: Adapter = ExceptionAdapter()
