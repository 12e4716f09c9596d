"""What a tool's lookup reports about the effect of an operation whose outcome is unknown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Found:
    """The effect exists downstream; `result` is what the write would have returned."""

    result: Any = None


@dataclass(frozen=True, slots=True)
class NotFound:
    """The downstream system has no such effect (conclusive only after the settle window)."""


@dataclass(frozen=True, slots=True)
class Unknown:
    """The lookup could not tell."""

    reason: str = ""


LookupResult = Found | NotFound | Unknown
