"""OpenTelemetry spans of guarded calls, seen by the SDK's in-memory exporter.

Executed, replayed and reconciled calls each make one `writesafe.call` span with the tool, the
outcome, the replayed flag and the executions it ran; executions and lookups are its children, and
a write's downstream request carries the execution span's trace context.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.conftest import MakeWriteSafe
from tests.reconcile_support import Shop, order_tool
from writesafe import (
    ToolError,
    WriteSafeError,
    fenced_client,
    inject_trace_context,
    instrument_tracing,
    uninstrument_tracing,
)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument_tracing(provider)
    try:
        yield exporter
    finally:
        uninstrument_tracing()
        provider.shutdown()


def _named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def _children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[str]:
    return [
        s.name
        for s in exporter.get_finished_spans()
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]


async def test_executed_replayed_and_reconciled_calls_make_their_spans(
    make_ws: MakeWriteSafe, spans: InMemorySpanExporter
) -> None:
    ws, shop = make_ws(), Shop(faults=["ok", "commit_then_timeout"])
    submit_order = order_tool(ws, shop)

    await submit_order("A1", idempotency_key="k1", scope="t")  # executed
    await submit_order("A1", idempotency_key="k1", scope="t")  # replayed
    with pytest.raises(WriteSafeError):
        await submit_order("B2", idempotency_key="k2", scope="t")  # outcome unknown
    await submit_order("B2", idempotency_key="k2", scope="t")  # reconciled by the lookup

    calls = _named(spans, "writesafe.call")
    assert [s.name for s in calls] == ["writesafe.call submit_order"] * 4
    seen = [
        (
            s.attributes["writesafe.key"],
            s.attributes["writesafe.outcome"],
            s.attributes["writesafe.replayed"],
            s.attributes["writesafe.attempts"],
        )
        for s in calls
        if s.attributes is not None
    ]
    assert seen == [
        ("k1", "executed", False, 1),
        ("k1", "replayed", True, 0),
        ("k2", "OUTCOME_UNKNOWN", False, 1),
        ("k2", "reconciled", True, 0),
    ]
    assert all(s.attributes and s.attributes["writesafe.tool"] == "submit_order" for s in calls)
    executed, replayed, unknown, reconciled = calls
    assert _children(spans, executed) == ["writesafe.execute submit_order"]
    assert _children(spans, replayed) == []
    assert _children(spans, unknown) == ["writesafe.execute submit_order"]
    assert _children(spans, reconciled) == ["writesafe.lookup submit_order"]
    assert unknown.status.status_code is StatusCode.ERROR
    assert unknown.status.description == "OUTCOME_UNKNOWN"
    failed_write = next(
        s for s in _named(spans, "writesafe.execute") if s.parent == unknown.context
    )
    assert failed_write.status.status_code is StatusCode.ERROR
    assert [e.name for e in failed_write.events] == ["exception"]
    (lookup,) = _named(spans, "writesafe.lookup")
    assert lookup.attributes is not None
    assert lookup.attributes["writesafe.lookup.result"] == "found"
    assert shop.placed == 2


async def test_retries_are_executions_of_one_call(
    make_ws: MakeWriteSafe, spans: InMemorySpanExporter
) -> None:
    ws = make_ws()
    tries = 0

    @ws.tool("flaky")
    async def flaky() -> str:
        nonlocal tries
        tries += 1
        if tries == 1:
            raise ToolError("DEPENDENCY_BUSY", "busy", retry_after_ms=1)
        return "ok"

    assert await flaky(idempotency_key="k") == "ok"
    (call,) = _named(spans, "writesafe.call")
    assert call.attributes is not None
    assert (call.attributes["writesafe.attempts"], call.attributes["writesafe.outcome"]) == (
        2,
        "executed",
    )
    executions = [
        s.attributes["writesafe.execution"]
        for s in _named(spans, "writesafe.execute")
        if s.attributes is not None
    ]
    assert executions == [1, 2]


async def test_a_reconciliation_pass_traces_each_lookup(
    make_ws: MakeWriteSafe, spans: InMemorySpanExporter
) -> None:
    ws, shop = make_ws(), Shop(faults=["commit_then_timeout"])
    submit_order = order_tool(ws, shop)
    with pytest.raises(WriteSafeError):
        await submit_order("A1", idempotency_key="k")

    report = await ws.reconcile()

    assert report.found == 1
    lookups = [s for s in _named(spans, "writesafe.lookup") if s.attributes is not None]
    assert [
        (s.attributes["writesafe.key"], s.attributes["writesafe.lookup.result"]) for s in lookups
    ] == [("k", "found")]
    (reconcile,) = _named(spans, "writesafe.reconcile")
    assert reconcile.attributes is not None
    assert (
        reconcile.attributes["writesafe.reconcile.found"],
        reconcile.attributes["writesafe.reconcile.examined"],
    ) == (1, 1)
    assert lookups[0].parent == reconcile.context


async def test_the_httpx_integration_forwards_the_execution_span_downstream(
    make_ws: MakeWriteSafe, spans: InMemorySpanExporter
) -> None:
    ws = make_ws()
    sent: list[httpx.Headers] = []

    def downstream(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers)
        return httpx.Response(201, json={"id": len(sent)})

    @ws.tool("call_out")
    async def call_out() -> int:
        async with fenced_client(transport=httpx.MockTransport(downstream)) as fenced:
            await fenced.post("http://shop.test/orders")
        headers: dict[str, str] = {}  # a write with a client of its own uses the helper
        inject_trace_context(headers)
        async with httpx.AsyncClient(transport=httpx.MockTransport(downstream)) as plain:
            response = await plain.post("http://shop.test/orders", headers=headers)
        return int(response.json()["id"])

    assert await call_out(idempotency_key="k") == 2
    (execution,) = _named(spans, "writesafe.execute")
    expected = f"00-{execution.context.trace_id:032x}-{execution.context.span_id:016x}-"
    assert [headers["traceparent"][: len(expected)] for headers in sent] == [expected] * 2
    assert sent[0]["idempotency-key"] == "k"  # the integration's own headers stay


async def test_no_spans_once_uninstrumented(
    make_ws: MakeWriteSafe, spans: InMemorySpanExporter
) -> None:
    uninstrument_tracing()
    ws, shop = make_ws(), Shop()
    submit_order = order_tool(ws, shop)
    headers: dict[str, str] = {}

    await submit_order("A1", idempotency_key="k")
    inject_trace_context(headers)

    assert spans.get_finished_spans() == ()
    assert headers == {}


def test_without_opentelemetry_calls_work_and_tracing_says_what_to_install(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, sys

        class NoOpenTelemetry:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ModuleNotFoundError(f"No module named {{name!r}}")

        sys.meta_path.insert(0, NoOpenTelemetry())
        from writesafe import WriteSafe, instrument_tracing

        async def main():
            async with WriteSafe("sqlite+aiosqlite:///{tmp_path / "l.db"}") as ws:
                @ws.tool("t")
                async def t() -> int:
                    return 7
                print(await t(idempotency_key="k"))

        asyncio.run(main())
        try:
            instrument_tracing()
        except RuntimeError as error:
            print(error)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "7",
        "tracing needs OpenTelemetry: pip install 'writesafe[otel]'",
    ]
