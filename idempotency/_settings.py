"""Configuration from arguments or `WRITESAFE_*` environment variables (arguments win)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from writesafe.idempotency._results import DEFAULT_MAX_RESULT_BYTES
from writesafe.idempotency._store_answers import DEFAULT_MAX_CACHED_BYTES
from writesafe.ledger import DEFAULT_DATABASE_URL
from writesafe.ledger._retention import DEFAULT_TOMBSTONE_RETENTION
from writesafe.reconciler._store_order import StoreOrder

# The Redis URLs the key store takes (a cluster's: `idempotency._keystore`).
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
REDIS_SCHEMES = ("redis://", "rediss://", "unix://", *CLUSTER_SCHEMES)

Settings = TypeVar("Settings", bound="CheckedSettings")


class SettingsRefused(ValueError):
    """A configuration refused: a value out of range, or one that would break a guarantee (its
    message is one line, naming the setting to change)."""


class CheckedSettings(BaseSettings):
    """Settings checked when made, from arguments or environment variables alike: a bad value
    is a one-line `SettingsRefused` naming the setting and its variable, not pydantic's report."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            prefix = type(self).model_config.get("env_prefix", "")
            raise SettingsRefused(_refusal(error, prefix)) from None


class WriteSafeSettings(CheckedSettings):
    """Every knob of a `WriteSafe`, with the embedded default: SQLite file, no Redis."""

    model_config = SettingsConfigDict(env_prefix="WRITESAFE_", extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    db_schema: str | None = Field(default=None, description="PostgreSQL schema for the ledger")
    redis_prefix: str = "writesafe"
    lease_seconds: float = Field(default=15.0, gt=0)
    wait_timeout: float = Field(default=5.0, ge=0)
    outcome_ttl: float = Field(
        default=86_400.0, gt=0, description="seconds Redis keeps a final outcome; at most retention"
    )
    retention: float = Field(
        default=86_400.0,
        gt=0,
        description="seconds a final operation and its attempts are kept (docs/operations.md)",
    )
    tombstone_retention: float = Field(
        default=DEFAULT_TOMBSTONE_RETENTION.total_seconds(),
        gt=0,
        description="seconds a pruned key says 'expired' before it is 'never seen' again",
    )
    restore_check_seconds: float = Field(
        default=10.0,
        ge=0,
        description="seconds between checks that the ledger was not restored (docs/operations.md)",
    )
    redis_first_repeats: float = Field(
        default=StoreOrder().threshold,
        ge=0,
        le=1,
        description="share of a tool's recent calls repeating a known key above which Redis is"
        " asked before the ledger (and the embedded ledger read before its claim); 0: always"
        " (docs/operations.md)",
    )
    max_result_bytes: int = Field(
        default=DEFAULT_MAX_RESULT_BYTES,
        ge=1,
        description="largest result JSON the ledger stores; above it, RESULT_NOT_STORED",
    )
    redis_max_result_bytes: int = Field(
        default=DEFAULT_MAX_CACHED_BYTES,
        ge=0,
        description="largest result JSON Redis caches; the ledger answers replays of larger ones",
    )
    connect_timeout: float = Field(default=5.0, gt=0)
    db_max_connections: int = Field(
        default=20,
        ge=2,
        description="PostgreSQL connections this process may hold, in all its pools together",
    )
    pool_size: int = Field(
        default=10,
        ge=1,
        description="how many of db_max_connections the guard's writes may use (at most all but 1)",
    )
    db_idle_seconds: float = Field(
        default=60.0, gt=0, description="seconds an unused PostgreSQL connection stays open"
    )
    reconcile_max_checks: int = Field(default=10, ge=1, description="checks before escalating")
    reconcile_backoff: float = Field(default=2.0, gt=0, description="first recheck delay (s)")
    reconcile_backoff_max: float = Field(default=600.0, gt=0, description="recheck delay cap (s)")
    reconcile_lease: float = Field(default=30.0, gt=0, description="a worker's claim lease (s)")
    reconcile_batch: int = Field(default=16, ge=1, description="operations leased at a time")

    @field_validator("redis_url")
    @classmethod
    def _a_redis_url(cls, url: str | None) -> str | None:
        if url and not url.startswith(REDIS_SCHEMES):
            raise ValueError("a Redis URL starts with " + ", ".join(REDIS_SCHEMES))
        return url


def overridden(base: Settings, overrides: Mapping[str, object]) -> Settings:
    """`base` with `overrides` on top, checked as when it was made (`model_copy(update=…)` would
    take them unchecked: a negative lease, say)."""
    return type(base)(**{**base.model_dump(), **overrides}) if overrides else base


def _refusal(error: ValidationError, prefix: str) -> str:
    """The first problem, without the value given: a URL may hold a password."""
    first = error.errors()[0]
    name = ".".join(str(part) for part in first["loc"])
    return f"{name} ({prefix}{name.upper()}): {first['msg'].removeprefix('Value error, ')}"
