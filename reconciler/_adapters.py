"""Adapters turn whatever a write raised into an envelope."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from reconciler._classify import Classification
from reconciler._contract import CodeRegistry
from reconciler._rules import ResponseAdapter


@runtime_checkable
class Adapter(Protocol):
    """Maps a failure of a write to the contract. Adapters are versioned: a pairing is a release."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    def classify(self, error: BaseException, codes: CodeRegistry) -> Classification:
        """Classify `error`; must never raise and must fail closed to UNKNOWN_ERROR."""
        ...


DEFAULT_ADAPTER: Adapter = ResponseAdapter(name="default", version="1")
"""No rules: exceptions by whether anything was sent, writesafe envelopes from downstream are
read (and checked), and every other response is UNKNOWN_ERROR with its raw evidence kept."""
