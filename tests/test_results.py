"""The first answer is every answer: a write's result reaches its first caller as every replay
decodes it, a result that cannot be stored (NaN included) is RESULT_NOT_STORED for every caller,
and stored
results are capped (in the ledger, and more tightly in Redis). On every backend."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from redis.asyncio import Redis

from tests.conftest import REDIS_URL, MakeWriteSafe
from writesafe import Status, WriteSafe, WriteSafeError, WriteSafeSettings
from writesafe.ledger import AttemptKind
from writesafe.reconciler import Code


class Opaque:
    """An object with no JSON form."""


class Reading(BaseModel):
    value: float


def deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


class Write:
    """A tool named `write` on `ws` that returns `make_result()`, counting its executions."""

    def __init__(self, ws: WriteSafe, make_result: Callable[[], Any]) -> None:
        self.executions = 0

        async def write() -> Any:
            self.executions += 1
            return make_result()

        self.tool = ws.tool("write")(write)


UNFAITHFUL = [
    pytest.param({1: "a", 2.5: "b"}, {"1": "a", "2.5": "b"}, id="non-str-keys"),
    pytest.param({3, 1, 2}, [1, 2, 3], id="set"),
    pytest.param((1, (2, 3)), [1, [2, 3]], id="tuple"),
    pytest.param(decimal.Decimal("1.10"), "1.10", id="decimal"),
]


@pytest.mark.parametrize(("result", "stored"), UNFAITHFUL)
async def test_a_result_json_changes_reaches_the_first_caller_as_replays_get_it(
    make_ws: MakeWriteSafe, result: Any, stored: Any
) -> None:
    ws = make_ws()
    write = Write(ws, lambda: result)

    first = await write.tool(idempotency_key="k")
    await ws._guard.flush()
    assert repr(first) == repr(stored)
    assert repr(await write.tool(idempotency_key="k")) == repr(first)
    assert write.executions == 1


async def test_the_declared_type_is_what_every_caller_gets(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()

    @ws.tool("ids")
    async def ids() -> dict[int, frozenset[int]]:
        return {1: frozenset({2}), 3: frozenset()}

    first = await ids(idempotency_key="k")
    assert first == {1: frozenset({2}), 3: frozenset()}
    assert await ids(idempotency_key="k") == first


UNSTORABLE = [
    pytest.param(lambda: {"items": deep(3_000)}, "no_json_form", id="nested-3000"),
    pytest.param(Opaque, "no_json_form", id="opaque-object"),
    pytest.param(lambda: {"note": "half a pair: \ud800"}, "no_json_form", id="lone-surrogate"),
    pytest.param(lambda: "x" * 1_048_577, "too_large", id="over-the-cap"),
    # JSON has no number for these: storing null instead would change the answer.
    pytest.param(lambda: {"x": math.nan}, "not_finite", id="nan"),
    pytest.param(lambda: [math.inf, -math.inf], "not_finite", id="infinities"),
    pytest.param(lambda: {"m": Reading(value=math.nan)}, "not_finite", id="nan-in-a-model"),
]


@pytest.mark.parametrize(("make_result", "reason"), UNSTORABLE)
async def test_an_unstorable_result_is_result_not_stored_for_every_caller_and_never_reruns(
    make_ws: MakeWriteSafe, backend: str, make_result: Any, reason: str
) -> None:
    ws = make_ws()
    write = Write(ws, make_result)

    with pytest.raises(WriteSafeError) as first:
        await write.tool(idempotency_key="k")
    envelope = first.value.envelope
    assert (envelope.code, envelope.retryable, envelope.next_action) == (
        Code.RESULT_NOT_STORED,
        False,
        "handoff",
    )
    assert envelope.operation is not None
    assert envelope.operation.status == "succeeded"
    await ws._guard.flush()
    elsewhere = make_ws().tool("write")(_never)  # another worker
    for replay in (write.tool, elsewhere):
        with pytest.raises(WriteSafeError) as again:
            await replay(idempotency_key="k")
        assert again.value.envelope.to_json_dict() == envelope.to_json_dict()
    assert write.executions == 1

    status = await ws.status("k")
    assert status is not None
    assert (status.status, status.result) == (Status.SUCCEEDED, None)
    assert status.error == envelope.with_operation(None)
    [run] = [a for a in status.attempts if a.kind is AttemptKind.EXECUTION]
    assert (run.outcome, run.code) == ("succeeded", Code.RESULT_NOT_STORED)
    assert run.evidence is not None
    assert run.evidence["reason"] == reason
    if backend == "postgres+redis":
        assert await redis_value(ws, "k") is None  # nothing cached, no lease left


async def _never() -> Any:
    raise AssertionError("a key whose write ran must not run again")


async def redis_value(ws: WriteSafe, key: str) -> bytes | None:
    assert ws.keystore is not None
    client = Redis.from_url(REDIS_URL)
    try:
        value: bytes | None = await client.get(ws.keystore.key("default", key))
        return value
    finally:
        await client.aclose()


async def test_the_ledger_cap_is_configurable(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(settings=WriteSafeSettings(max_result_bytes=100))

    @ws.tool("write")
    async def write(size: int) -> str:
        return "x" * size

    assert await write(98, idempotency_key="small") == "x" * 98  # 100 bytes of JSON
    with pytest.raises(WriteSafeError) as raised:
        await write(99, idempotency_key="large")
    assert raised.value.code == Code.RESULT_NOT_STORED


@pytest.mark.parametrize("backend", ["postgres+redis"])
async def test_redis_caches_only_results_under_its_cap_and_the_ledger_answers_the_rest(
    make_ws: MakeWriteSafe,
) -> None:
    ws, executions = make_ws(), 0

    @ws.tool("write")
    async def write(size: int) -> str:
        nonlocal executions
        executions += 1
        return "é" * size

    small, large = "é" * 1_000, "é" * 40_000  # 40,000 characters, 80,002 bytes of JSON
    assert await write(1_000, idempotency_key="small") == small
    assert await write(40_000, idempotency_key="large") == large
    await ws._guard.flush()
    cached = await redis_value(ws, "small")
    assert cached is not None
    assert cached.startswith(b"O:")
    assert await redis_value(ws, "large") is None  # neither the outcome nor a lease

    for _ in range(2):
        assert await write(1_000, idempotency_key="small") == small
        assert await write(40_000, idempotency_key="large") == large
        await ws._guard.flush()
    assert await redis_value(ws, "large") is None
    assert executions == 2


# -- first answer == replay, for generated results ------------------------------------------

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["\ud800", "\x00", "💥"]),
    st.decimals(allow_nan=True),
    st.datetimes(timezones=st.just(datetime.UTC)),
    st.uuids(),
    st.binary(max_size=6),
    st.builds(Opaque),
    st.complex_numbers(allow_nan=True),
    st.frozensets(st.integers(), max_size=3),
    st.sets(st.text(max_size=3), max_size=3),
)
results = st.one_of(
    st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.tuples(children, children),
            st.dictionaries(
                st.one_of(st.text(max_size=4), st.integers(), st.floats(), st.booleans()),
                children,
                max_size=4,
            ),
        ),
        max_leaves=12,
    ),
    st.builds(deep, st.integers(240, 270)),  # around the encoder's depth limit
    st.builds(lambda n: "y" * n, st.integers(1_500, 2_500)),  # around the caps below
)

CAPS = {"max_result_bytes": 2_048, "redis_max_result_bytes": 600}


class Callers:
    """The tool served by one `WriteSafe` with this backend's stores, and by a second one on the
    ledger alone: a replay from Redis (where there is Redis) and one from the ledger."""

    def __init__(self, store_options: dict[str, Any]) -> None:
        self.runner = asyncio.Runner()
        self.box: dict[str, Any] = {}
        ledger_only = {k: v for k, v in store_options.items() if not k.startswith("redis")}
        self.ws = WriteSafe(**store_options, settings=WriteSafeSettings(**CAPS))
        self.ledger_ws = WriteSafe(**ledger_only, settings=WriteSafeSettings(**CAPS))
        self.executions = 0
        self.keys = itertools.count()

        async def write(n: int) -> Any:
            self.executions += 1
            return self.box["result"]

        self.first = self.ws.tool("write")(write)
        self.from_ledger = self.ledger_ws.tool("write")(write)

    def answers(self, result: Any) -> list[str]:
        """The first caller's answer for a new key, then its replays (Redis, ledger)."""
        self.box["result"] = result
        return self.runner.run(self._answers(next(self.keys)))

    async def _answers(self, n: int) -> list[str]:
        answers = [await _answer(self.first, n)]
        await self.ws._guard.flush()  # the Redis copy is written behind the first answer
        answers.append(await _answer(self.first, n))
        answers.append(await _answer(self.from_ledger, n))
        return answers

    def close(self) -> None:
        self.runner.run(self.ws.close())
        self.runner.run(self.ledger_ws.close())
        self.runner.close()


async def _answer(tool: Any, n: int) -> str:
    try:
        return repr(await tool(n, idempotency_key=f"k-{n}"))
    except WriteSafeError as error:
        return error.envelope.model_dump_json()


@pytest.fixture
def callers(store_options: dict[str, Any]) -> Iterator[Callers]:
    made = Callers(store_options)
    try:
        yield made
    finally:
        made.close()


def test_for_any_result_the_first_answer_is_every_replay(callers: Callers) -> None:
    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(result=results)
    def one_key(result: Any) -> None:
        before = callers.executions
        first, cached, ledger = callers.answers(result)
        assert cached == first
        assert ledger == first
        assert callers.executions == before + 1

    one_key()
    assert callers.executions >= 30
