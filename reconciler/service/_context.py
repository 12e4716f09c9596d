"""What every route of one service instance shares."""

from __future__ import annotations

from dataclasses import dataclass

from idempotency import WriteSafe
from ledger import ApiKeys
from reconciler.service._cursor import Cursors
from reconciler.service._rate_limits import RateLimits
from reconciler.service._settings import ServiceSettings


@dataclass(frozen=True, slots=True)
class ServiceContext:
    ws: WriteSafe
    keys: ApiKeys
    settings: ServiceSettings
    cursors: Cursors
    limits: RateLimits
