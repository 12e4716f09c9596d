"""What happened: operation and attempt records, the status state machine, SQL persistence.

The ledger is the source of truth of writesafe. It imports neither `idempotency` nor `reconciler`.
"""

from writesafe.ledger._api_keys import ApiKeyRecord, ApiKeys, Role
from writesafe.ledger._clock import Clock, ManualClock, StoreTime, SystemClock
from writesafe.ledger._engine import DEFAULT_DATABASE_URL, UnsupportedDatabase, create_engine
from writesafe.ledger._hot_path import LATE_SEND, Intent, Outcome
from writesafe.ledger._json import canonical_json, dumps_json, loads_json
from writesafe.ledger._lease_judges import LeaseHeld
from writesafe.ledger._ledger import Ledger
from writesafe.ledger._migrations import (
    LedgerNotMigrated,
    current_revision,
    downgrade,
    head_revision,
    revisions,
)
from writesafe.ledger._models import ApiKey, Attempt, Base, LedgerState, Operation
from writesafe.ledger._reconciliation import LEASE_EXPIRED, DueBatch, Settlement
from writesafe.ledger._records import AttemptKind, AttemptRecord, OperationRecord
from writesafe.ledger._restore import (
    RESTORED_KEY,
    FileMark,
    Level,
    Mark,
    Restored,
    Signal,
    check_restored,
    clear_restored,
    declare_restored,
    mark_path,
    restored_state,
)
from writesafe.ledger._retention import (
    DEFAULT_BATCH_SIZE,
    FINAL_STATES,
    PruneReport,
    expired_at,
    prune,
)
from writesafe.ledger._states import (
    TRANSITIONS,
    IllegalTransition,
    Status,
    check_transition,
)
from writesafe.ledger._writer import Claim

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_DATABASE_URL",
    "FINAL_STATES",
    "LATE_SEND",
    "LEASE_EXPIRED",
    "RESTORED_KEY",
    "TRANSITIONS",
    "ApiKey",
    "ApiKeyRecord",
    "ApiKeys",
    "Attempt",
    "AttemptKind",
    "AttemptRecord",
    "Base",
    "Claim",
    "Clock",
    "DueBatch",
    "FileMark",
    "IllegalTransition",
    "Intent",
    "LeaseHeld",
    "Ledger",
    "LedgerNotMigrated",
    "LedgerState",
    "Level",
    "ManualClock",
    "Mark",
    "Operation",
    "OperationRecord",
    "Outcome",
    "PruneReport",
    "Restored",
    "Role",
    "Settlement",
    "Signal",
    "Status",
    "StoreTime",
    "SystemClock",
    "UnsupportedDatabase",
    "canonical_json",
    "check_restored",
    "check_transition",
    "clear_restored",
    "create_engine",
    "current_revision",
    "declare_restored",
    "downgrade",
    "dumps_json",
    "expired_at",
    "head_revision",
    "loads_json",
    "mark_path",
    "prune",
    "restored_state",
    "revisions",
]
