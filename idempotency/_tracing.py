"""Optional OpenTelemetry spans: one per guarded call, a child per execution and per lookup.

Off until `instrument_tracing()`; until then no OpenTelemetry module is imported (the `otel`
extra) and each hook costs a read of one global. Spans are made with the OpenTelemetry API and
exported by whatever SDK the application configured. Metrics stay Prometheus.

- `writesafe.call` wraps `Guard.run`: `writesafe.tool`, `.scope`, `.key`, `.outcome` (executed,
  replayed, reconciled, or the envelope's code), `.replayed` and `.attempts` (executions this call
  ran). "reconciled" is a replay that this call's own lookup found downstream.
- `writesafe.execute` is current while the user's write runs, so a downstream request made
  inside it (the httpx integration, `inject_trace_context`) carries its trace context.
- `writesafe.lookup` wraps each lookup, inline or in a reconciliation pass: `.result` is found,
  not_found or unknown.
- `writesafe.reconcile` wraps `WriteSafe.reconcile`: the pass's lookups are its children, its
  report's counts (`writesafe.reconcile.found`, …) its attributes.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from writesafe.idempotency._context import active_operation
from writesafe.idempotency._errors import WriteSafeError
from writesafe.idempotency._logging import operation_logged
from writesafe.reconciler import Found, LookupOperation, LookupResult, NotFound, ReconcileReport

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from writesafe.idempotency._spec import GuardedCall

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")

_tracer: Tracer | None = None


@dataclass(slots=True)
class _CallCounts:
    """What the child spans of one guarded call saw."""

    executions: int = 0
    found: bool = False


_counts: ContextVar[_CallCounts | None] = ContextVar("writesafe_trace_counts", default=None)


def instrument_tracing(tracer_provider: TracerProvider | None = None) -> None:
    """Start making spans, with `tracer_provider` or OpenTelemetry's global one."""
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError as missing:
        raise RuntimeError(
            "tracing needs OpenTelemetry: pip install 'writesafe[otel]'"
        ) from missing
    _tracer = trace.get_tracer("writesafe", tracer_provider=tracer_provider)


def uninstrument_tracing() -> None:
    """Stop making spans (those already open end as usual)."""
    global _tracer
    _tracer = None


def tracing_on() -> bool:
    """Whether calls make spans (a path that skips `Guard.run` must then not be taken)."""
    return _tracer is not None


def inject_trace_context(headers: MutableMapping[str, str]) -> None:
    """Add the current trace context (`traceparent`, …) to outgoing request `headers`.

    For writes that call downstream without the httpx integration; a no-op while tracing is off.
    """
    if _tracer is not None:
        from opentelemetry import propagate

        propagate.inject(headers)


def traced_call(
    run: Callable[Concatenate[S, GuardedCall, P], Awaitable[tuple[R, bool]]],
) -> Callable[Concatenate[S, GuardedCall, P], Awaitable[tuple[R, bool]]]:
    """Decorate `Guard.run`: a `writesafe.call` span around the call when tracing is on.

    With tracing off the call is `run`'s own coroutine, not one awaiting it: a coroutine frame
    more costs its creation and a step on every resumption of the call."""

    @functools.wraps(run)
    def wrapper(
        guard: S, call: GuardedCall, /, *args: P.args, **kwargs: P.kwargs
    ) -> Awaitable[tuple[R, bool]]:
        tracer = _tracer
        if tracer is None:
            return run(guard, call, *args, **kwargs)
        return traced(tracer, guard, call, *args, **kwargs)

    async def traced(
        tracer: Tracer, guard: S, call: GuardedCall, /, *args: P.args, **kwargs: P.kwargs
    ) -> tuple[R, bool]:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        counts = _CallCounts()
        token = _counts.set(counts)
        attributes = {
            "writesafe.tool": call.tool.name,
            "writesafe.scope": call.scope,
            "writesafe.key": call.key,
        }
        with tracer.start_as_current_span(
            f"writesafe.call {call.tool.name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                value, replayed = await run(guard, call, *args, **kwargs)
            except WriteSafeError as error:
                _finish_call(span, counts, error.code, replayed=False)
                span.set_status(Status(StatusCode.ERROR, error.code))
                raise
            except BaseException as error:
                _finish_call(span, counts, "error", replayed=False)
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                raise
            finally:
                _counts.reset(token)
            outcome = "executed" if not replayed else "reconciled" if counts.found else "replayed"
            _finish_call(span, counts, outcome, replayed=replayed)
            return value, replayed

    return wrapper


def traced_reconcile(
    reconcile: Callable[Concatenate[S, P], Coroutine[Any, Any, ReconcileReport]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, ReconcileReport]]:
    """Decorate `WriteSafe.reconcile`: a `writesafe.reconcile` span, the pass's lookups its
    children, its report's counts as attributes."""

    @functools.wraps(reconcile)
    async def wrapper(ws: S, /, *args: P.args, **kwargs: P.kwargs) -> ReconcileReport:
        tracer = _tracer
        if tracer is None:
            return await reconcile(ws, *args, **kwargs)
        with tracer.start_as_current_span("writesafe.reconcile") as span:
            report = await reconcile(ws, *args, **kwargs)
            for name, value in report.model_dump().items():
                span.set_attribute(f"writesafe.reconcile.{name}", value)
            return report

    return wrapper


def _finish_call(span: Span, counts: _CallCounts, outcome: str, *, replayed: bool) -> None:
    span.set_attribute("writesafe.outcome", outcome)
    span.set_attribute("writesafe.replayed", replayed)
    span.set_attribute("writesafe.attempts", counts.executions)


def traced_execution(tool: str, write: Awaitable[R]) -> Awaitable[R]:
    """The user's write, run inside a `writesafe.execute` span when tracing is on (else as is)."""
    if _tracer is None:
        return write
    return _execute(_tracer, tool, write)


async def _execute(tracer: Tracer, tool: str, write: Awaitable[R]) -> R:
    from opentelemetry.trace import Status, StatusCode

    counts = _counts.get()
    if counts is not None:
        counts.executions += 1
    operation = active_operation()
    attributes: dict[str, str | int] = {"writesafe.tool": tool}
    if operation is not None:
        attributes |= {"writesafe.key": operation.key, "writesafe.execution": operation.execution}
    with tracer.start_as_current_span(
        f"writesafe.execute {tool}",
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            return await write
        except BaseException as error:  # a timeout cancels the write: that is news too
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            raise


Lookup = Callable[[LookupOperation], Awaitable[LookupResult]]


def traced_lookup(lookup: Lookup) -> Lookup:
    """A tool's lookup that makes a `writesafe.lookup` span when tracing is on and names its
    operation on log lines."""

    @functools.wraps(lookup)
    async def wrapper(op: LookupOperation) -> LookupResult:
        with operation_logged(op.key, op.scope, op.tool):
            tracer = _tracer
            if tracer is None:
                return await lookup(op)
            attributes = {"writesafe.tool": op.tool, "writesafe.key": op.key}
            with tracer.start_as_current_span(
                f"writesafe.lookup {op.tool}", attributes=attributes
            ) as span:
                result = await lookup(op)
                span.set_attribute("writesafe.lookup.result", _lookup_result(result))
                counts = _counts.get()
                if counts is not None and isinstance(result, Found):
                    counts.found = True
                return result

    return wrapper


def _lookup_result(result: object) -> str:
    if isinstance(result, Found):
        return "found"
    return "not_found" if isinstance(result, NotFound) else "unknown"
