"""One JSON spelling for everything the ledger stores: compact, key-sorted, no NaN."""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import to_jsonable_python

# Built once: `json.dumps` with any non-default option constructs an encoder on every call.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def dumps_json(value: Any) -> str:
    """Canonical JSON text of plain JSON data; raises ValueError for NaN/infinity."""
    return _ENCODER.encode(value)


def canonical_json(value: Any) -> str:
    """Canonical JSON of rich values (pydantic models, dataclasses, UUIDs, datetimes, Decimals).

    Raises ValueError/TypeError (via pydantic) when the value has no JSON form.
    """
    return dumps_json(to_jsonable_python(_order_sets(value)))


# Leaves of argument trees: returned as they are without further type checks (a hot path).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _order_sets(value: Any) -> Any:
    # Set iteration order follows the per-process hash seed; sort them so that two processes
    # fingerprint the same arguments alike.
    if type(value) in _SCALARS:
        return value
    if isinstance(value, set | frozenset):
        return sorted(
            (_order_sets(v) for v in value), key=lambda v: dumps_json(to_jsonable_python(v))
        )
    if isinstance(value, dict):
        return {k: _order_sets(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_order_sets(v) for v in value]
    return value


def loads_json(text: str) -> Any:
    return json.loads(text)
