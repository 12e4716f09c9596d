"""Asking a tool's lookup about an operation: bounded in time, never raising, honest about settling.

A lookup that raises, hangs past its timeout or answers nonsense is `unknown`; a `NotFound` before
the settle window has closed is `unknown` too, because a slow write may still land.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from writesafe.ledger import AttemptRecord, OperationRecord, Status, dumps_json, loads_json
from writesafe.reconciler._classify import EVIDENCE_MESSAGE_LIMIT, exception_evidence
from writesafe.reconciler._contract import CODES, CodeRegistry
from writesafe.reconciler._lookup import Found, LookupResult, NotFound, Unknown
from writesafe.reconciler._misfit import ResultMisfit
from writesafe.reconciler._redaction import DEFAULT_REDACTION, Redaction
from writesafe.reconciler._sends import sent_nothing
from writesafe.reconciler._views import AttemptView

logger = logging.getLogger("writesafe")


@dataclass(frozen=True, slots=True)
class LookupOperation:
    """The read-only view of an operation that a lookup receives as `op`.

    Downstream systems that accept a client reference can be searched by `key`: the write sees it
    as `ws.current_operation().key`, or as its `idempotency_key` parameter if it declares one.
    """

    key: str
    scope: str
    tool: str
    arguments: Mapping[str, Any]
    status: Status
    executions: int
    last_sent_at: datetime | None
    attempts: tuple[AttemptView, ...]

    @classmethod
    def from_records(
        cls,
        operation: OperationRecord,
        attempts: Sequence[AttemptRecord],
        codes: CodeRegistry = CODES,
    ) -> LookupOperation:
        return cls(
            key=operation.key,
            scope=operation.scope,
            tool=operation.tool,
            arguments=MappingProxyType(loads_json(operation.arguments)),
            status=operation.status,
            executions=operation.executions,
            last_sent_at=operation.last_sent_at,
            attempts=tuple(AttemptView.from_record(attempt, codes) for attempt in attempts),
        )


Lookup = Callable[[LookupOperation], Awaitable[LookupResult]]


@dataclass(frozen=True, slots=True)
class LookupSpec:
    """How to ask one tool's downstream system whether an operation's effect exists.

    `lookup` None: the tool cannot be asked, so its unknown outcomes go to an operator.
    `encode` is the tool's own result encoding, so a found result replays like an executed one.
    """

    tool: str
    lookup: Lookup | None
    settle_after: float
    timeout: float
    encode: Callable[[Any], str]
    redaction: Redaction = DEFAULT_REDACTION
    codes: CodeRegistry = CODES  # judges the stored envelopes the lookup is shown


class LookupOutcome(StrEnum):
    """What a lookup established, as recorded on its attempt."""

    FOUND = "found"
    NOT_FOUND = "not_found"  # conclusive: the settle window had closed
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Check:
    """One lookup's conclusion and its evidence; `result` is the encoded found result."""

    outcome: LookupOutcome
    started_at: datetime
    evidence: dict[str, Any] = field(default_factory=dict)
    result: str | None = None
    settles_at: datetime | None = None  # a premature NotFound becomes conclusive then
    escalate: bool = False  # an answer nobody can believe: a person decides (`StillUnknown`)

    def attempt(self, actor: str, owner: str | None = None) -> dict[str, Any]:
        """The audited attempt row's values."""
        return {
            "outcome": self.outcome.value,
            "evidence": dumps_json(self.evidence),
            "actor": actor,
            "owner": owner,
            "started_at": self.started_at,
        }

    def retry_after_ms(self, now: datetime, default_ms: int) -> int:
        """When asking again can tell more: at the end of the settle window, else `default_ms`."""
        if self.settles_at is None:
            return default_ms
        return max(int((self.settles_at - now) / timedelta(milliseconds=1)), 1)


async def run_lookup(
    spec: LookupSpec,
    operation: OperationRecord,
    attempts: Sequence[AttemptRecord],
    started_at: datetime,
) -> Check:
    """Ask `spec.lookup` about `operation`; any failure to answer is an `unknown` check.

    `started_at` is the ledger's time, read before the lookup starts: the settle window is
    judged on the clock that stamped `last_sent_at`, not on this process's. The check's evidence
    (the lookup's reason, an exception, the found result's excerpt) is redacted here, before it
    is recorded or shown.
    """
    check = await _ask(spec, operation, attempts, started_at)
    check = replace(check, evidence=spec.redaction.evidence(check.evidence))
    logger.info(
        "lookup of %s/%s (%s): %s%s",
        operation.scope,
        operation.key,
        spec.tool,
        check.outcome.value,
        " (escalated)" if check.escalate else "",
        extra={
            "writesafe_key": operation.key,
            "writesafe_scope": operation.scope,
            "writesafe_tool": spec.tool,
            "writesafe_lookup": check.outcome.value,
        },
    )
    return check


async def _ask(
    spec: LookupSpec,
    operation: OperationRecord,
    attempts: Sequence[AttemptRecord],
    started_at: datetime,
) -> Check:
    if spec.lookup is None:
        return Check(LookupOutcome.UNKNOWN, started_at, {"reason": "the tool has no lookup"})
    view = LookupOperation.from_records(operation, attempts, spec.codes)
    began = time.perf_counter()
    deadline = asyncio.timeout(spec.timeout)
    try:
        async with deadline:
            answer: object = await spec.lookup(view)
    except Exception as error:
        evidence = exception_evidence(error)
        if deadline.expired():
            evidence = {"reason": f"the lookup did not answer within {spec.timeout}s"}
        return Check(LookupOutcome.UNKNOWN, started_at, {**evidence, **_elapsed(began)})
    elapsed = _elapsed(began)
    if elapsed["elapsed_ms"] > spec.timeout * 1000:
        # It blocked the loop past its timeout (a blocking call in an `async def` cannot be
        # cancelled): whatever it says came too late to be trusted, as if it had not answered.
        reason = f"the lookup answered after its {spec.timeout}s timeout; the answer is discarded"
        evidence = {"reason": reason, "late": True, "answer": type(answer).__name__, **elapsed}
        return Check(LookupOutcome.UNKNOWN, started_at, evidence)
    return _conclude(spec, operation, view, answer, started_at, elapsed)


def _conclude(
    spec: LookupSpec,
    operation: OperationRecord,
    view: LookupOperation,
    answer: object,
    started_at: datetime,
    elapsed: dict[str, Any],
) -> Check:
    if isinstance(answer, Found):
        return _found(spec, view, answer, started_at, elapsed)
    if isinstance(answer, NotFound):
        sent_at = operation.last_sent_at or operation.created_at
        settles_at = sent_at + timedelta(seconds=spec.settle_after)
        if started_at >= settles_at:
            return Check(LookupOutcome.NOT_FOUND, started_at, elapsed)
        evidence = {"reason": "not found before the settle window closed", **elapsed}
        evidence["settles_at"] = settles_at.isoformat()
        return Check(LookupOutcome.UNKNOWN, started_at, evidence, settles_at=settles_at)
    if isinstance(answer, Unknown):
        reason = answer.reason[:EVIDENCE_MESSAGE_LIMIT] or "the lookup could not tell"
        return Check(LookupOutcome.UNKNOWN, started_at, {"reason": reason, **elapsed})
    reason = f"the lookup returned {type(answer).__name__}, not Found, NotFound or Unknown"
    return Check(LookupOutcome.UNKNOWN, started_at, {"reason": reason, **elapsed})


def _found(
    spec: LookupSpec,
    view: LookupOperation,
    answer: Found,
    started_at: datetime,
    elapsed: dict[str, Any],
) -> Check:
    """A `Found`, believed only when its result fits the tool and the ledger cannot disprove it."""
    try:
        encoded = spec.encode(answer.result)
    except ResultMisfit as misfit:
        reason = f"the lookup found a result that does not fit the tool: {misfit}"
        evidence = {**misfit.evidence, "reason": reason, **elapsed}
        return Check(LookupOutcome.UNKNOWN, started_at, evidence, escalate=True)
    except Exception as error:
        reason = f"the found result has no JSON form: {type(error).__name__}"
        return Check(LookupOutcome.UNKNOWN, started_at, {"reason": reason, **elapsed})
    excerpt = encoded[:EVIDENCE_MESSAGE_LIMIT]
    if sent_nothing(view.attempts):
        reason = "the lookup found the effect, but no execution of this operation sent its write"
        evidence = {"reason": reason, "found": excerpt, **elapsed}
        return Check(LookupOutcome.UNKNOWN, started_at, evidence, escalate=True)
    return Check(LookupOutcome.FOUND, started_at, {"result": excerpt, **elapsed}, encoded)


def _elapsed(began: float) -> dict[str, Any]:
    return {"elapsed_ms": round((time.perf_counter() - began) * 1000, 3)}
