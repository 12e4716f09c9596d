"""Reconciliation jobs: establish the truth of unknown outcomes, never execute a write.

A pass leases due operations (`outcome_unknown` ones, and `in_flight` ones whose worker died),
asks each tool's lookup, and records what it learned: found → `succeeded` with the found result;
proven absent → `failed` with a retryable no-effect code, so the caller's next call with the key
continues under the continuation policy (the reconciler itself runs nothing); still unknown →
checked again after an exponential backoff, until the check budget is spent → `needs_attention`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from writesafe.ledger import AttemptKind, Ledger, OperationRecord, Settlement, Status, dumps_json
from writesafe.reconciler._check import Check, LookupSpec, run_lookup
from writesafe.reconciler._contract import CodeRegistry
from writesafe.reconciler._decisions import Established, ProvenAbsent, judge_lookup
from writesafe.reconciler._single import SingleWorkerLock

logger = logging.getLogger("writesafe")

ACTOR = "reconciler"


class ReconcileReport(BaseModel):
    """What a reconciliation pass did, by operation."""

    model_config = ConfigDict(frozen=True)

    examined: int = 0  # leased and looked at
    found: int = 0  # the effect exists: succeeded, with the found result
    absent: int = 0  # proven absent: failed (no effect), the key's next call may continue
    still_unknown: int = 0  # checked again later, with backoff
    escalated: int = 0  # needs_attention: the check budget is spent
    superseded: int = 0  # a caller's own lookup (or an operator) changed it first
    errors: int = 0  # not processed (e.g. the ledger failed); its lease hands it on
    expired_leases: int = 0  # in_flight operations of dead workers, now outcome_unknown
    seconds: float = 0.0

    def __add__(self, other: ReconcileReport) -> ReconcileReport:
        return ReconcileReport(
            **{name: getattr(self, name) + getattr(other, name) for name in type(self).model_fields}
        )


@dataclass(frozen=True, slots=True)
class ReconcilePolicy:
    """Bounds of reconciliation: checks before escalating, their backoff, and the claim lease."""

    max_checks: int = 10
    backoff_seconds: float = 2.0
    backoff_max_seconds: float = 600.0
    lease_seconds: float = 30.0
    batch_size: int = 16  # operations leased, and looked up concurrently, at a time

    def backoff(self, checks: int) -> float:
        """Delay before check number `checks + 1`: doubling from `backoff_seconds`, capped."""
        return float(min(self.backoff_seconds * 2 ** max(checks - 1, 0), self.backoff_max_seconds))


class _Verdict(StrEnum):
    FOUND = "found"
    ABSENT = "absent"
    STILL_UNKNOWN = "still_unknown"
    ESCALATED = "escalated"
    SUPERSEDED = "superseded"
    ERRORS = "errors"


class Reconciler:
    """Runs reconciliation passes for the tools in `lookups` (tool name → how to look it up).

    Any number of reconcilers may share one PostgreSQL ledger; on SQLite a pass holds an
    exclusive lock while it runs, and another process's pass meanwhile is refused with
    `ReconcilerBusy`.
    """

    def __init__(
        self,
        ledger: Ledger,
        lookups: Mapping[str, LookupSpec],
        codes: CodeRegistry,
        policy: ReconcilePolicy | None = None,
    ) -> None:
        self.ledger = ledger
        self.lookups = lookups
        self.codes = codes
        self.policy = policy or ReconcilePolicy()
        self.worker = uuid.uuid4().hex
        self._lock = _single_worker_lock(ledger)

    async def run(
        self,
        *,
        limit: int | None = None,
        older_than: float = 0.0,
        tool: str | None = None,
        scope: str | None = None,
        on_progress: Callable[[ReconcileReport], None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> ReconcileReport:
        """One pass over what is due now: at most `limit` operations, sent at least `older_than`
        seconds ago, of `tool` (default: every tool in `lookups`), in `scope` (default: all)."""
        if tool is not None and tool not in self.lookups:
            raise ValueError(f"no tool named {tool!r} is registered")
        tools = sorted(self.lookups) if tool is None else [tool]
        began = time.perf_counter()
        tally: Counter[str] = Counter()
        if not tools:
            return _report(tally, began)
        with self._lock.held() if self._lock is not None else contextlib.nullcontext():
            lease = max(
                self.policy.lease_seconds, 2 * max(self.lookups[name].timeout for name in tools) + 1
            )
            # SQLite: every lease that looks crashed now is watched from here, so that one wait
            # lets this pass take over all of them (PostgreSQL: None, its clock judges).
            watch_all = await self.ledger.watch_leases(
                tools=tools, older_than=older_than, scope=scope
            )
            watched = False
            while limit is None or tally["examined"] < limit:
                if stop is not None and stop.is_set():
                    break
                size = self.policy.batch_size
                if limit is not None:
                    size = min(size, limit - tally["examined"])
                batch = await self.ledger.claim_due(
                    limit=size,
                    lease_seconds=lease,
                    tools=tools,
                    older_than=older_than,
                    scope=scope,
                )
                tally["expired_leases"] += batch.expired
                if not batch.operations:
                    if batch.watching is None or watched:
                        break
                    # SQLite: a lease that looks crashed is expired only once this process has
                    # watched it for a whole lease; a pass waits once, until every lease it saw
                    # at its start has been watched that long, then takes them over batch by batch.
                    watched = True
                    await self.ledger.clock.sleep(max(batch.watching, watch_all or 0.0))
                    continue
                verdicts = await self._reconcile(batch.operations)
                tally.update(verdict.value for verdict in verdicts)
                tally["examined"] += len(verdicts)
                if on_progress is not None:
                    on_progress(_report(tally, began))
        return _report(tally, began)

    async def count_due(self, *, older_than: float = 0.0, tool: str | None = None) -> int:
        """About how many operations a pass would examine now (for progress displays)."""
        tools = sorted(self.lookups) if tool is None else [tool]
        return await self.ledger.count_due(tools=tools, older_than=older_than) if tools else 0

    async def _reconcile(self, operations: Sequence[OperationRecord]) -> list[_Verdict]:
        """Look the batch up concurrently, then record every conclusion in one transaction."""
        try:
            attempts = await self.ledger.attempts_of([op.id for op in operations])
            # The ledger's clock, read before any lookup starts, judges their settle windows.
            now = await self.ledger.now()
            checks = await asyncio.gather(
                *(run_lookup(self.lookups[op.tool], op, attempts[op.id], now) for op in operations)
            )
            plans = [
                self._plan(op, check, now) for op, check in zip(operations, checks, strict=True)
            ]
            rows = await self.ledger.settle_many([settlement for settlement, _ in plans])
        except Exception:
            logger.exception(
                "reconciling %d operations failed; their leases hand them to a later pass",
                len(operations),
            )
            return [_Verdict.ERRORS] * len(operations)
        return [
            verdict if row is not None else _Verdict.SUPERSEDED
            for (_, verdict), row in zip(plans, rows, strict=True)
        ]

    def _plan(
        self, operation: OperationRecord, check: Check, now: datetime
    ) -> tuple[Settlement, _Verdict]:
        """What `check` means for `operation`: the change to record, and its verdict; `now` is
        the ledger's time before the lookup."""
        audit = check.attempt(ACTOR, self.worker)
        values: dict[str, Any]
        verdict = judge_lookup(check, operation, self.codes)
        if isinstance(verdict, Established):
            values = {"result": verdict.result, "next_check_at": None}
            return _settle(operation, audit, Status.SUCCEEDED, values), _Verdict.FOUND
        if isinstance(verdict, ProvenAbsent):
            # Nobody is waiting to execute: record the absence; the caller's next call continues.
            envelope = verdict.absence.envelope
            values = {
                "error": dumps_json(envelope.to_json_dict()),
                "last_code": envelope.code,
                "next_check_at": None,
            }
            return _settle(operation, audit, Status.FAILED, values), _Verdict.ABSENT
        if verdict.settling:
            # Not found, but too early to believe it: ask again once the window closes, without
            # spending the budget on a question that could not be answered yet.
            assert check.settles_at is not None
            checks, due = operation.checks, check.settles_at
        else:
            checks = operation.checks + 1
            due = now + timedelta(seconds=self.policy.backoff(checks))
        if checks >= self.policy.max_checks or verdict.escalate:
            audit["evidence"] = dumps_json({**check.evidence, "escalated_after_checks": checks})
            values = {"checks": checks, "next_check_at": None}
            return (
                _settle(operation, audit, Status.NEEDS_ATTENTION, values),
                _Verdict.ESCALATED,
            )
        values = {"checks": checks, "next_check_at": due}
        return _settle(operation, audit, None, values), _Verdict.STILL_UNKNOWN


def _settle(
    operation: OperationRecord, audit: dict[str, Any], status: Status | None, values: dict[str, Any]
) -> Settlement:
    return Settlement(operation, AttemptKind.LOOKUP, audit, status, values)


def _report(tally: Counter[str], began: float) -> ReconcileReport:
    return ReconcileReport(
        **{name: tally[name] for name in ReconcileReport.model_fields if name != "seconds"},
        seconds=round(time.perf_counter() - began, 3),
    )


def _single_worker_lock(ledger: Ledger) -> SingleWorkerLock | None:
    return None if ledger.file is None else SingleWorkerLock(ledger.file)
