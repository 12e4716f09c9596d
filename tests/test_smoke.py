from tests.conftest import MakeWriteSafe


async def test_first_call_executes_and_duplicate_replays(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    effects: list[str] = []

    @ws.tool("submit_order")
    async def submit_order(order: dict[str, str]) -> dict[str, str]:
        effects.append(order["sku"])
        return {"order_id": f"o-{len(effects)}"}

    first = await submit_order({"sku": "A1"}, idempotency_key="ord-7")
    again = await submit_order({"sku": "A1"}, idempotency_key="ord-7")
    assert first == again == {"order_id": "o-1"}
    assert effects == ["A1"]
