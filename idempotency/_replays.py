"""Replaying a stored result: as the tool's declared type, or a typed answer, never another type."""

from __future__ import annotations

import logging
from typing import Any

from writesafe.idempotency._errors import WriteSafeError
from writesafe.idempotency._spec import GuardedCall
from writesafe.reconciler import CodeRegistry, OperationInfo
from writesafe.reconciler._misfit import ResultMisfit, replay_misfit

logger = logging.getLogger("writesafe")


def decoded(call: GuardedCall, text: str, info: OperationInfo, codes: CodeRegistry) -> Any:
    """A stored result, replayed as the tool's declared type; one that no longer fits it is a
    typed handoff (the record stays as it is), never a value of another type."""
    try:
        return call.tool.codec.decode(text)
    except ResultMisfit as misfit:
        logger.warning("stored result of %s/%s does not fit: %s", call.scope, call.key, misfit)
        raise WriteSafeError(replay_misfit(misfit, info, codes)) from None
