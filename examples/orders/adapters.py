"""Three versions of the order service's adapter, as recorded.

adapter1 knows backend1: 422 POSTCODE_INVALID is bad input, every 409 is contention.
adapter2 adds an exact rule for backend2's 409 INVALID_POSTCODE ahead of the 409 branch and
translates its field name. adapter3 narrows the branch: only 409 LOCKED is contention; any other
409 falls through to UNKNOWN_ERROR, because an unknown conflict is not known to be transient.
adapter3 is the HTTP preset with the order service's exact rules ahead of it: the preset leaves
409 unmapped for that very reason, and maps 401 by its meaning.
"""

from __future__ import annotations

from writesafe.reconciler import Code, ResponseAdapter, Rule, http_adapter

_POSTCODE_422 = Rule(
    Code.INPUT_INVALID, status=422, body={"code": "POSTCODE_INVALID"}, field_from="field"
)
_POSTCODE_409 = Rule(
    Code.INPUT_INVALID, status=409, body={"reason": "INVALID_POSTCODE"}, field_from="field"
)
_UNAUTHENTICATED = Rule(Code.AUTH_REQUIRED, status=401)
_FIELDS = {"shipping.postcode": "postcode"}

adapter1 = ResponseAdapter(
    name="orders",
    version="1",
    rules=(_POSTCODE_422, Rule(Code.DEPENDENCY_BUSY, status=409), _UNAUTHENTICATED),
)

adapter2 = ResponseAdapter(
    name="orders",
    version="2",
    rules=(_POSTCODE_422, _POSTCODE_409, Rule(Code.DEPENDENCY_BUSY, status=409), _UNAUTHENTICATED),
    fields=_FIELDS,
)

adapter3 = http_adapter(
    "orders",
    "3",
    rules=(
        _POSTCODE_422,
        _POSTCODE_409,
        Rule(Code.DEPENDENCY_BUSY, status=409, body={"reason": "LOCKED"}),
    ),
    fields=_FIELDS,
)
