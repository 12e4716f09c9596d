"""What every route of one service instance shares."""

from __future__ import annotations

from dataclasses import dataclass

from writesafe.idempotency import WriteSafe
from writesafe.ledger import ApiKeys
from writesafe.service._cursor import Cursors
from writesafe.service._rate_limits import RateLimits
from writesafe.service._settings import ServiceSettings


@dataclass(frozen=True, slots=True)
class ServiceContext:
    ws: WriteSafe
    keys: ApiKeys
    settings: ServiceSettings
    cursors: Cursors
    limits: RateLimits
