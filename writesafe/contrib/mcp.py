"""MCP: serve a guarded tool to agents through an `MCPServer` (mcp 2.x).

Failures come back as a `CallToolResult` with `isError`, the envelope in
`structuredContent.error` and the same JSON in a text block. The key is the tool's
`idempotency_key` argument; when an agent leaves it out, the tool's `key=` function decides, else
the call's own fingerprint is the key, so an agent that repeats a call verbatim (the usual retry)
reaches the same operation.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from writesafe._extras import MissingExtra

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.utilities.func_metadata import func_metadata
    from mcp.types import CallToolResult, ToolAnnotations
except ModuleNotFoundError as missing:
    raise MissingExtra(__name__, "mcp", missing) from missing
from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, WrapValidator

from writesafe.idempotency._arguments import KEY_PARAMETER
from writesafe.idempotency._errors import WriteSafeError, invalid_input
from writesafe.idempotency._keys import DEFAULT_SCOPE, MAX_KEY_LENGTH
from writesafe.idempotency._tool import Tool
from writesafe.reconciler import to_call_tool_result

__all__ = ["add_mcp_tool"]

META_KEY = "writesafe/operation"

ScopeOf = Callable[[Context[Any, Any]], str | Awaitable[str]]

_CONTEXT = "writesafe_mcp_context"

_KEY_REQUIRED = (
    "Unique per intended operation: reuse it, unchanged, when retrying the same request after an "
    "error or a timeout. A different request needs a different key."
)
_KEY_OPTIONAL = (
    _KEY_REQUIRED + " Leave it out and identical calls (same arguments) count as one operation: "
    "to do the same thing twice on purpose, give each a key."
)


def add_mcp_tool(
    server: MCPServer[Any],
    tool: Tool[Any],
    *,
    destructive: bool,
    open_world: bool = True,
    require_key: bool = False,
    scope: ScopeOf | None = None,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
) -> None:
    """Register the guarded `tool` on `server` under `name` (default: the tool's name).

    `destructive` must be stated: writesafe cannot know whether the write deletes or overwrites
    (`destructiveHint`). `idempotentHint` is true because the guard makes it so, and
    `readOnlyHint` is the tool's `read_only` (a read-only tool is never destructive).
    `scope(ctx)` names the caller's scope (e.g. from its auth token).
    With `require_key`, agents must send `idempotency_key`; otherwise it is derived when absent.
    """
    function = tool.spec.function
    wrapper = _wrapper(tool, _signature(tool, require_key), require_key, scope)
    server.add_tool(
        wrapper,
        name=name or tool.name,
        title=title,
        description=description or inspect.getdoc(function) or f"{tool.name} (write-safe)",
        annotations=ToolAnnotations(
            read_only_hint=tool.spec.read_only,
            destructive_hint=destructive and not tool.spec.read_only,
            idempotent_hint=True,
            open_world_hint=open_world,
        ),
    )


def _wrapper(
    tool: Tool[Any], signature: inspect.Signature, require_key: bool, scope: ScopeOf | None
) -> Callable[..., Awaitable[CallToolResult]]:
    """The function MCPServer registers: its signature is `signature`, its result the tool's,
    converted the way MCPServer converts results (so it matches the published output schema)."""

    async def call_tool(**arguments: Any) -> CallToolResult:
        context: Context[Any, Any] = arguments.pop(_CONTEXT)
        invalid = next((v for v in arguments.values() if isinstance(v, _Invalid)), None)
        if invalid is not None:
            return to_call_tool_result(invalid_input(invalid.field, invalid.message).envelope)
        key: str | None = arguments.pop(KEY_PARAMETER)
        try:
            caller_scope = DEFAULT_SCOPE if scope is None else await _maybe_await(scope(context))
            invocation = await tool.invoke(
                (), arguments, key=key, scope=caller_scope, key_from_arguments=not require_key
            )
        except WriteSafeError as error:
            return to_call_tool_result(error.envelope)
        result = convert(invocation.value)
        assert isinstance(result, CallToolResult)
        operation = {"key": invocation.key, "scope": caller_scope, "replayed": invocation.replayed}
        return result.model_copy(update={"meta": {**(result.meta or {}), META_KEY: operation}})

    call_tool.__name__ = call_tool.__qualname__ = tool.name
    call_tool.__signature__ = signature  # type: ignore[attr-defined]
    call_tool.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    call_tool.__annotations__["return"] = signature.return_annotation
    convert = func_metadata(call_tool, skip_names=[_CONTEXT]).convert_result
    return call_tool


def _signature(tool: Tool[Any], require_key: bool) -> inspect.Signature:
    """The tool's own parameters, the documented key, and the MCP context (hidden from the
    schema); the return type is published as the output schema."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    hints = typing.get_type_hints(tool.spec.function, include_extras=True)
    parameters = []
    for parameter in tool.spec.signature.parameters.values():
        if parameter.name == _CONTEXT:
            raise TypeError(f"{tool.name}: parameter name {_CONTEXT} is reserved")
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"{tool.name}: *args/**kwargs have no MCP input schema")
        annotation: Any = Annotated[hints.get(parameter.name, Any), _lenient(parameter.name)]
        parameters.append(parameter.replace(kind=keyword, annotation=annotation))
    # The bounds are published, not enforced by the SDK: the guard checks the key itself, so a
    # bad key is answered with the envelope (INPUT_INVALID) like every other failure.
    key_field = Field(
        description=_KEY_REQUIRED if require_key else _KEY_OPTIONAL,
        json_schema_extra={"minLength": 1, "maxLength": MAX_KEY_LENGTH},
    )
    lenient = _lenient(KEY_PARAMETER)
    if require_key:
        key = inspect.Parameter(
            KEY_PARAMETER, keyword, annotation=Annotated[str, key_field, lenient]
        )
    else:
        key = inspect.Parameter(
            KEY_PARAMETER,
            keyword,
            annotation=Annotated[str | None, key_field, lenient],
            default=None,
        )
    context = inspect.Parameter(_CONTEXT, keyword, annotation=Context)
    returns = hints.get("return")
    output = CallToolResult if returns is None else Annotated[CallToolResult, returns]
    return inspect.Signature([*parameters, key, context], return_annotation=output)


@dataclass(frozen=True, slots=True)
class _Invalid:
    """An argument that broke the input schema: the call is answered INPUT_INVALID, not run."""

    field: str
    message: str


def _lenient(name: str) -> WrapValidator:
    """Validate as declared (the schema is unchanged), but hand a failure to the tool as an
    `_Invalid` value, so the agent gets the envelope instead of the SDK's prose. A missing
    required argument is still refused by the SDK itself."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join([name, *(str(part) for part in first["loc"])])
            return _Invalid(field, f"{field}: {first['msg']}")

    return WrapValidator(validate)


async def _maybe_await(value: str | Awaitable[str]) -> str:
    return await value if inspect.isawaitable(value) else value
