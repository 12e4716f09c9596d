"""A listing's page as JSON, each operation's result spliced in as the ledger stored it, sent in
slices that leave the event loop to other requests in between.

A 500-row page of ~2 KB results is about 1 MB of JSON. Parsed into Python objects (one
`json.loads` per row), validated and serialized again, it held the event loop for ~70 ms a page on
this machine, and its megabyte went to the socket in one write: the better part of what another
tenant's requests waited for beside a flood of listings (docs/performance.md). The ledger keeps
each result as JSON text already (canonical: compact, key-sorted, written by `ledger._json`), so
the page is made without parsing it: the rest of the row is serialized by its model, in
pydantic-core, and the stored text follows as its `result` member. A page of more than
`ROWS_PER_SLICE` rows is sent as a stream of slices of that many rows, the loop taking its other
work between two. The answer is the JSON the model would make, each `result` member last.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence

from fastapi import Response
from fastapi.responses import StreamingResponse
from pydantic_core import to_json

from writesafe.ledger import OperationRecord
from writesafe.reconciler import OperationSummary

ROWS_PER_SLICE = 50  # the default page: answered whole, with its length
_NO_RESULT = {"result"}
_MEDIA_TYPE = "application/json"


def page_response(rows: Sequence[OperationRecord], next_cursor: str | None) -> Response:
    """The `OperationPage` of `rows` and `next_cursor`, as the API answers it."""
    if len(rows) <= ROWS_PER_SLICE:
        return Response(page_json(rows, next_cursor), media_type=_MEDIA_TYPE)
    return StreamingResponse(_streamed(rows, next_cursor), media_type=_MEDIA_TYPE)


def page_json(rows: Sequence[OperationRecord], next_cursor: str | None) -> bytes:
    """The page's JSON, whole."""
    return b"".join(_slices(rows, next_cursor))


async def _streamed(
    rows: Sequence[OperationRecord], next_cursor: str | None
) -> AsyncIterator[bytes]:
    for piece in _slices(rows, next_cursor):
        yield piece
        await asyncio.sleep(0)  # a slice written without waiting would not let the loop go


def _slices(rows: Sequence[OperationRecord], next_cursor: str | None) -> Iterator[bytes]:
    yield b'{"items":['
    for start in range(0, len(rows), ROWS_PER_SLICE):
        rows_json = b",".join(_row_json(row) for row in rows[start : start + ROWS_PER_SLICE])
        yield (b"," if start else b"") + rows_json
    yield b'],"next_cursor":' + to_json(next_cursor) + b"}"


def _row_json(row: OperationRecord) -> bytes:
    summary = OperationSummary.from_record(row, with_result=False)
    # By alias, as FastAPI answers a response model: the envelope's `schema_` is `schema`.
    rest = summary.model_dump_json(exclude=_NO_RESULT, by_alias=True).encode()
    stored = b"null" if row.result is None else row.result.encode()
    return rest[:-1] + b',"result":' + stored + b"}"  # `rest` is an object with members
