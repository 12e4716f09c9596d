"""What the key store answers, in terms that need no Redis client: a claim's state, the cached
outcome's encoding, and the lease token.

Kept apart from `_keystore` so that the guard can name these without importing redis-py, which
takes about half a second to load: a process with no Redis URL (every SQLite deployment, each CLI
run) never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from writesafe.ledger import OperationRecord, Status
from writesafe.reconciler import OperationInfo

DEFAULT_MAX_CACHED_BYTES = 65_536
"""The largest outcome Redis caches (its value: a short header and the result's JSON, in bytes):
a larger one would hold Redis memory for a whole outcome TTL, so the ledger answers its replays."""


class LeaseState(Enum):
    CACHED = 1
    ACQUIRED = 2
    BUSY = 3
    UNAVAILABLE = 4


@dataclass(frozen=True, slots=True)
class CachedOutcome:
    """What Redis keeps of a succeeded operation: enough to replay it or refuse a reuse."""

    fingerprint: str
    tool: str
    executions: int
    max_executions: int
    result: str  # the ledger's JSON text of the result

    def encode(self) -> str:
        # A header line, then the result as stored: a replay parses the result once (no JSON
        # inside JSON). Tool names are printable, so they hold no newline.
        header = f"{self.fingerprint} {self.executions} {self.max_executions} {self.tool}"
        return f"{header}\n{self.result}"

    @classmethod
    def decode(cls, text: str) -> CachedOutcome:
        header, _, result = text.partition("\n")
        fingerprint, executions, max_executions, tool = header.split(" ", 3)
        return cls(fingerprint, tool, int(executions), int(max_executions), result)

    @classmethod
    def of(cls, operation: OperationRecord) -> CachedOutcome:
        assert operation.result is not None, "only a succeeded operation is cached"
        return cls(
            operation.fingerprint,
            operation.tool,
            operation.executions,
            operation.max_executions,
            operation.result,
        )

    def operation_info(self, key: str) -> OperationInfo:
        """The envelope's `operation` block for the succeeded operation this copy stands for."""
        return OperationInfo(
            key=key,
            status=Status.SUCCEEDED.value,
            attempt=self.executions,
            attempts_left=max(self.max_executions - self.executions, 0),
        )


def lease_token(owner: str, fingerprint: str) -> str:
    """The Redis lease token names the payload too, so a busy lease tells a duplicate from a
    different payload that the ledger must judge (KEY_REUSED or a continuation)."""
    return f"{owner}/{fingerprint}"


def same_payload(token: str | None, fingerprint: str) -> bool:
    """Whether the lease `token` (None: its holder is unknown) is held for this payload."""
    return token is None or token.endswith(f"/{fingerprint}")


@dataclass(frozen=True, slots=True)
class StoreClaim:
    """The key store's answer: the cached outcome, or the lease holder's token when busy."""

    state: LeaseState
    holder: str | None = None
    outcome: CachedOutcome | None = None
