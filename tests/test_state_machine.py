"""Property: no sequence of ledger events reaches a transition the state machine forbids.

Hypothesis drives the real `Ledger` (embedded SQLite) with random claims, finishes by the owner
or by a stranger, lease expiries, retries, restarts and arbitrary transitions. After every step
the stored row must have moved only along `TRANSITIONS`, its version by exactly one per change,
and refused requests must have changed nothing — but for a fenced-off finish that may have had
an effect, which makes a row judged by absence unknown again.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from writesafe.ledger import (
    LATE_SEND,
    TRANSITIONS,
    IllegalTransition,
    Intent,
    LeaseHeld,
    Ledger,
    ManualClock,
    OperationRecord,
    Outcome,
    Status,
)

OWNER, STRANGER = "owner", "stranger"
statuses = st.sampled_from(list(Status))
MAY_HAVE_SENT = {Status.SUCCEEDED, Status.OUTCOME_UNKNOWN}  # how an execution that sent ends
ABSENCE_JUDGED = {Status.FAILED, Status.OUTCOME_UNKNOWN}  # judged by absence, or waiting on it


def intent(owner: str = OWNER, fingerprint: str = "fp") -> Intent:
    return Intent("s", "k", "tool", fingerprint, "{}", owner, 30.0, 3)


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.directory = tempfile.TemporaryDirectory()
        self.clock = ManualClock()
        self.ledger = Ledger.from_url(
            f"sqlite+aiosqlite:///{Path(self.directory.name) / 'ledger.db'}",
            clock=self.clock,
            lease_seconds=30.0,
        )
        self.run(self.ledger.migrate())
        self.row: OperationRecord | None = None  # the last row we know the ledger holds

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def teardown(self) -> None:
        self.run(self.ledger.close())
        self.loop.close()
        self.directory.cleanup()

    def observe(self, returned: OperationRecord | None) -> None:
        """Check the stored row against the last one we knew, then remember it."""
        stored = self.run(self.ledger.get("s", "k"))
        assert stored is not None
        assert self.row is not None
        if returned is None:
            assert stored == self.row, "a refused or fenced request changed the row"
        else:
            assert returned == stored
            assert stored.version == self.row.version + 1
            assert stored.status in TRANSITIONS[self.row.status]
        self.row = stored

    @precondition(lambda self: self.row is None)
    @rule()
    def claim(self) -> None:
        claim = self.run(self.ledger.claim(intent()))
        assert claim.created
        assert claim.operation.status is Status.IN_FLIGHT
        self.row = claim.operation

    @precondition(lambda self: self.row is not None)
    @rule()
    def duplicate_claim_changes_nothing(self) -> None:
        claim = self.run(self.ledger.claim(intent(owner=STRANGER, fingerprint="other")))
        assert not claim.created
        self.observe(None)

    @precondition(lambda self: self.row is not None)
    @rule(status=statuses, owner=st.sampled_from([OWNER, STRANGER]))
    def finish(self, status: Status, owner: str) -> None:
        assert self.row is not None
        try:
            returned = self.run(self.ledger.finish(self.row, owner, Outcome(status, result="0")))
        except IllegalTransition:
            assert status not in TRANSITIONS[self.row.status]
            returned = None
        else:
            fenced = owner != self.row.lease_owner
            assert (returned is None) == fenced
            if fenced and status in MAY_HAVE_SENT and self.row.status in ABSENCE_JUDGED:
                self.observe_voided()
                return
        self.observe(returned)

    def observe_voided(self) -> None:
        """A fenced-off execution that may have had an effect: the absence the row was judged
        by (or waits on) is void, and it is unknown again."""
        stored = self.run(self.ledger.get("s", "k"))
        assert stored is not None
        assert self.row is not None
        assert (stored.status, stored.last_code) == (Status.OUTCOME_UNKNOWN, LATE_SEND)
        assert stored.version == self.row.version + 1
        # From `failed` a transition; an unknown row only starts its settle window again.
        assert stored.status is self.row.status or stored.status in TRANSITIONS[self.row.status]
        self.row = stored

    @precondition(lambda self: self.row is not None and self.row.status is Status.IN_FLIGHT)
    @rule(seconds=st.integers(min_value=0, max_value=60))
    def lease_expiry(self, seconds: int) -> None:
        assert self.row is not None
        self.clock.advance(seconds)
        expired = self.run(self.ledger.expire(self.row))
        # A lease still held (watched for less than a lease, on SQLite) changes nothing.
        self.observe(None if isinstance(expired, LeaseHeld) else expired)

    @precondition(lambda self: self.row is not None)
    @rule()
    def automatic_retry(self) -> None:
        """What the guard does between two executions: record the failure, then restart."""
        assert self.row is not None
        failed = Outcome(Status.FAILED, error="{}", code="DEPENDENCY_BUSY")
        try:
            returned = self.run(self.ledger.finish(self.row, OWNER, failed))
        except IllegalTransition:
            assert Status.FAILED not in TRANSITIONS[self.row.status]
            returned = None
        self.observe(returned)
        if returned is None:
            return
        self.observe(self.run(self.ledger.restart(self.row, intent())))

    @precondition(lambda self: self.row is not None)
    @rule()
    def continuation(self) -> None:
        assert self.row is not None
        try:
            returned = self.run(self.ledger.restart(self.row, intent(fingerprint="changed")))
        except IllegalTransition:
            assert Status.IN_FLIGHT not in TRANSITIONS[self.row.status]
            returned = None
        self.observe(returned)

    @precondition(lambda self: self.row is not None)
    @rule(status=statuses)
    def any_transition(self, status: Status) -> None:
        assert self.row is not None
        try:
            returned = self.run(self.ledger.transition(self.row, status))
        except IllegalTransition:
            assert status not in TRANSITIONS[self.row.status]
            returned = None
        self.observe(returned)

    @precondition(lambda self: self.row is not None)
    @rule()
    def stale_writer_is_refused(self) -> None:
        """A writer holding an older version never changes the row."""
        assert self.row is not None
        if self.row.version == 1 or Status.NEEDS_ATTENTION not in TRANSITIONS[self.row.status]:
            return
        stale = OperationRecord(**{**_fields(self.row), "version": self.row.version - 1})
        self.observe(self.run(self.ledger.transition(stale, Status.NEEDS_ATTENTION)))

    @invariant()
    def succeeded_is_final(self) -> None:
        if self.row is not None and self.row.status is Status.SUCCEEDED:
            assert TRANSITIONS[Status.SUCCEEDED] == frozenset()


def _fields(record: OperationRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in OperationRecord.__slots__}


TestLedgerStateMachine = LedgerMachine.TestCase
TestLedgerStateMachine.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
