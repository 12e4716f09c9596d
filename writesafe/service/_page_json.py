"""A listing's page as JSON bytes, each operation's result spliced in as the ledger stored it.

A 500-row page of ~2 KB results is about 1 MB of JSON. Parsed into Python objects (one
`json.loads` per row), validated and serialized again, it held the event loop for ~80 ms a page on
this machine: the better part of what another tenant's requests waited for beside a flood of
listings (docs/performance.md). The ledger keeps each result as JSON text already (canonical:
compact, key-sorted, written by `ledger._json`), so the page is made without ever parsing it: the
rest of the row is serialized by its model, in pydantic-core, and the stored text follows as its
`result` member. The answer is the same JSON as the model's, its `result` member last.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_core import to_json

from writesafe.ledger import OperationRecord
from writesafe.reconciler import OperationSummary

_NO_RESULT = {"result"}


def page_json(rows: Sequence[OperationRecord], next_cursor: str | None) -> bytes:
    """The `OperationPage` of `rows` and `next_cursor`, as the API answers it."""
    items = b",".join(_row_json(row) for row in rows)
    return b'{"items":[' + items + b'],"next_cursor":' + to_json(next_cursor) + b"}"


def _row_json(row: OperationRecord) -> bytes:
    summary = OperationSummary.from_record(row, with_result=False)
    rest = summary.model_dump_json(exclude=_NO_RESULT).encode()
    stored = b"null" if row.result is None else row.result.encode()
    return rest[:-1] + b',"result":' + stored + b"}"  # `rest` is an object with members
