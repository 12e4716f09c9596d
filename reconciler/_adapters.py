"""Adapters turn whatever a write raised into an envelope."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from writesafe.reconciler._admission import admit
from writesafe.reconciler._causes import Untrusted
from writesafe.reconciler._classify import Classification, exception_evidence
from writesafe.reconciler._contract import Code, CodeRegistry
from writesafe.reconciler._rules import ResponseAdapter

logger = logging.getLogger("writesafe")


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


@runtime_checkable
class AnswerAdapter(Protocol):
    """An adapter that also judges successful answers (a 2xx body that says it failed)."""

    def classify_answer(self, answer: object, codes: CodeRegistry) -> Classification | None:
        """The failure `answer` states, or None if it is a success; must never raise."""
        ...


def failure_of(adapter: Adapter, error: BaseException, codes: CodeRegistry) -> Classification:
    """What the tool's `error` means, by its adapter, through the door (`admit`): never raises,
    and an adapter that breaks or disagrees with the contract fails closed."""
    try:
        classified = adapter.classify(error, codes)
    except Exception as broken:  # an adapter must never turn a failure into a crash
        return _adapter_failed(adapter, broken, codes)
    return admit(classified, codes, source=adapter_tag(adapter))


def answer_failure(adapter: Adapter, answer: object, codes: CodeRegistry) -> Classification | None:
    """The failure a tool's successful answer states, if its adapter judges answers and says
    so (through the door, like `failure_of`); None for a success."""
    # What `isinstance(adapter, AnswerAdapter)` checks, without walking the protocol's class on
    # every successful call (about 10 µs of a first execution's CPU).
    classify_answer: Callable[[object, CodeRegistry], Classification | None] | None = getattr(
        adapter, "classify_answer", None
    )
    if classify_answer is None:
        return None
    try:
        stated = classify_answer(answer, codes)
    except Exception as broken:  # an adapter must never turn an answer into a crash
        return _adapter_failed(adapter, broken, codes)
    return None if stated is None else admit(stated, codes, source=adapter_tag(adapter))


def adapter_tag(adapter: Adapter) -> str:
    return f"{adapter.name}/{adapter.version}"


def _adapter_failed(adapter: Adapter, broken: Exception, codes: CodeRegistry) -> Classification:
    logger.exception("adapter %s failed", adapter_tag(adapter))
    envelope = codes.envelope(
        Code.UNKNOWN_ERROR,
        f"the adapter {adapter_tag(adapter)} failed",
        cause=Untrusted.ADAPTER_FAILED.value,
    )
    return Classification(envelope, exception_evidence(broken))


DEFAULT_ADAPTER: Adapter = ResponseAdapter(name="default", version="1")
"""No rules: exceptions by whether anything was sent, writesafe envelopes from downstream are
read (and checked), and every other response is UNKNOWN_ERROR with its raw evidence kept."""
