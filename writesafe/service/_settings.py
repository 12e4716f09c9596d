"""Knobs of the HTTP service, from arguments or `WRITESAFE_SERVICE_*` environment variables."""

from __future__ import annotations

from limits import parse_many
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from writesafe.idempotency._settings import CheckedSettings


class ServiceSettings(CheckedSettings):
    model_config = SettingsConfigDict(env_prefix="WRITESAFE_SERVICE_", extra="ignore")

    max_body_bytes: int = Field(
        default=64 * 1024, ge=0, description="Larger request bodies are refused with 413."
    )
    ready_timeout: float = Field(
        default=2.0, gt=0, description="Seconds /readyz waits for each store before failing."
    )
    cursor_secret: SecretStr | None = Field(
        default=None,
        description="Seals listing cursors (any string, the same on every replica); unset: a key "
        "per process, so a cursor opens only in the process that made it.",
    )
    rate_limits: bool = Field(
        default=True, description="Whether requests are rate-limited at all (off for tests)."
    )
    rate_limit_per_key: str = Field(
        default="100/second",
        description="Requests per API key, in `limits` notation (`N/second;M/minute`).",
    )
    rate_limit_anonymous: str = Field(
        default="20/second",
        description="Requests per client address without a valid key (unknown or no key, "
        "/readyz), in `limits` notation.",
    )

    tenant_work_units: int = Field(
        default=16,
        ge=1,
        description="Units of work one tenant scope may have in flight (a request costs 1, plus "
        "1 per 50 rows it lists); past them, 429 at once.",
    )

    header_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a request's headers may take to arrive (from the connection's "
        "opening or the request's first byte); then the connection is closed.",
    )
    body_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a request's body may take to arrive after its headers.",
    )
    keep_alive_timeout: int = Field(
        default=5, ge=1, description="Seconds an idle connection is kept between requests."
    )
    max_connections: int = Field(
        default=512,
        ge=1,
        description="Open connections (and requests in progress) at most; past it, 503.",
    )

    @field_validator("rate_limit_per_key", "rate_limit_anonymous")
    @classmethod
    def _limits_notation(cls, value: str) -> str:
        parse_many(value)  # ValueError for anything the limiter could not enforce
        return value
