"""Knobs of the HTTP service, from arguments or `WRITESAFE_SERVICE_*` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WRITESAFE_SERVICE_", extra="ignore")

    max_body_bytes: int = Field(
        default=64 * 1024, ge=0, description="Larger request bodies are refused with 413."
    )
    ready_timeout: float = Field(
        default=2.0, gt=0, description="Seconds /readyz waits for each store before failing."
    )
