"""A listing's page, made from the results' stored JSON text and streamed when large, is the JSON
its model would make."""

from __future__ import annotations

from typing import Any

from tests.service.support import Service, on_the_module_loop, seed
from writesafe.ledger import Role
from writesafe.reconciler import OperationSummary
from writesafe.service._models import OperationPage
from writesafe.service._page_json import ROWS_PER_SLICE

# Results a model's serializer and the ledger's canonical JSON might spell differently.
_RESULTS: list[Any] = [
    {"zeta": [1, 2.5, None, True], "alpha": {"nested": "ünïcödé ✓", "quote": 'say "hi"\n'}},
    "a string result",
    12345678901234567890,
    [],
    None,
]


@on_the_module_loop
async def test_a_page_is_what_its_model_serializes(service: Service) -> None:
    ws, scope = service.ws, service.scopes[0]
    await seed(ws, scope)  # every status, an error envelope among them

    @ws.tool(f"shapes-{scope}")
    async def shapes(n: int) -> Any:
        return _RESULTS[n]

    for n in range(len(_RESULTS)):
        await shapes(n, idempotency_key=f"shape-{n}", scope=scope)
    async with service.as_(scope, Role.READER) as reader:
        first = await reader.get("/v1/operations", params={"limit": 6})
        cursor = first.json()["next_cursor"]
        rest = await reader.get("/v1/operations", params={"limit": 50, "cursor": cursor})
    assert first.headers["content-type"] == "application/json"
    rows = await ws.ledger.list(scope=scope, limit=50)
    assert len(rows) == 9
    for answer, page_rows, next_cursor in ((first, rows[:6], cursor), (rest, rows[6:], None)):
        page = OperationPage(
            items=[OperationSummary.from_record(row) for row in page_rows],
            next_cursor=next_cursor,
        )
        assert answer.json() == page.model_dump(mode="json", by_alias=True)


@on_the_module_loop
async def test_a_page_larger_than_a_slice_is_streamed_and_the_same_json(service: Service) -> None:
    ws, scope = service.ws, service.scopes[0]

    @ws.tool(f"orders-{scope}")
    async def order(n: int) -> dict[str, Any]:
        return {"order": n, "lines": [{"sku": f"S{n}-{i}", "qty": i} for i in range(3)]}

    count = ROWS_PER_SLICE * 2 + 1  # two slices and one row
    for n in range(count):
        await order(n, idempotency_key=f"order-{n}", scope=scope)
    async with service.as_(scope, Role.READER) as reader:
        answer = await reader.get("/v1/operations", params={"limit": 500})
    assert answer.status_code == 200
    assert "content-length" not in answer.headers  # streamed
    rows = await ws.ledger.list(scope=scope, limit=500)
    assert len(rows) == count
    page = OperationPage(
        items=[OperationSummary.from_record(row) for row in rows], next_cursor=None
    )
    assert answer.json() == page.model_dump(mode="json", by_alias=True)
