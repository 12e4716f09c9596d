"""docs/api.md from the service's OpenAPI document, so the reference cannot drift from the code.

`python scripts/api_docs.py` rewrites docs/api.md; a test fails when the committed file differs.
"""

from __future__ import annotations

from typing import Any

JsonSchema = dict[str, Any]

_CONSTRAINTS = {
    "minLength": "min length {}",
    "maxLength": "max length {}",
    "minimum": "≥ {}",
    "maximum": "≤ {}",
    "pattern": "pattern `{}`",
    "default": "default `{}`",
}


def render_markdown(openapi: dict[str, Any]) -> str:
    """The API reference: overview, every operation, every schema."""
    info = openapi["info"]
    lines = [
        f"# {info['title']} HTTP API {info['version']}",
        "",
        "<!-- Generated from the OpenAPI document by scripts/api_docs.py; do not edit. -->",
        "",
        info.get("description", "").strip(),
        "",
        "## Operations",
        "",
    ]
    for path, methods in openapi["paths"].items():
        for method, operation in methods.items():
            lines += _operation(method.upper(), path, operation)
    lines += ["## Schemas", ""]
    for name, schema in sorted(openapi["components"]["schemas"].items()):
        lines += _schema(name, schema)
    return "\n".join(lines).rstrip() + "\n"


def _operation(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    lines = [f"### {method} {path}", "", operation.get("summary", ""), ""]
    if operation.get("description"):
        lines += [operation["description"], ""]
    lines += [
        "Authentication: "
        + ("`Authorization: Bearer <API key>`" if operation.get("security") else "none"),
        "",
    ]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in parameters:
            lines.append(
                f"| `{p['name']}` | {p['in']} | {_type(p['schema'])} | "
                f"{'yes' if p.get('required') else 'no'} | {_describe(p['schema'], p)} |"
            )
        lines.append("")
    body = operation.get("requestBody")
    if body:
        for media, content in body["content"].items():
            required = "required" if body.get("required") else "optional"
            lines += [f"Request body ({media}, {required}): {_type(content['schema'])}", ""]
    lines += ["| status | content | body | meaning |", "|---|---|---|---|"]
    for status, response in operation["responses"].items():
        for media, content in (response.get("content") or {"": {}}).items():
            schema = content.get("schema")
            headers = ", ".join(f"`{h}`" for h in response.get("headers", {}))
            meaning = response["description"] + (f" Headers: {headers}." if headers else "")
            shown = _type(schema) if schema else ""
            lines.append(f"| {status} | {media} | {shown} | {meaning} |")
    return [*lines, ""]


def _schema(name: str, schema: JsonSchema) -> list[str]:
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [_cell(schema["description"]), ""]
    if "enum" in schema:
        values = ", ".join(f"`{v}`" for v in schema["enum"])
        return [*lines, f"One of: {values}.", ""]
    properties = schema.get("properties", {})
    if properties:
        required = set(schema.get("required", []))
        lines += ["| field | type | required | description |", "|---|---|---|---|"]
        for field, spec in properties.items():
            lines.append(
                f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} | "
                f"{_describe(spec)} |"
            )
        lines.append("")
    extra = schema.get("additionalProperties")
    if extra is False:
        lines += ["Unknown fields are refused.", ""]
    elif extra is True:
        lines += ["Further members may appear (extensions).", ""]
    return lines


def _type(schema: JsonSchema) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    for combinator, joiner in (("anyOf", " \\| "), ("oneOf", " \\| ")):
        if combinator in schema:
            return joiner.join(_type(option) for option in schema[combinator])
    if "const" in schema:
        return f"`{schema['const']!r}`".replace("'", '"')
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return "object" if extra is True else f"object of {_type(extra)}"
    if kind is None:
        return "any JSON"
    return f"{kind}" + (f" ({schema['format']})" if "format" in schema else "")


def _describe(schema: JsonSchema, parameter: dict[str, Any] | None = None) -> str:
    text = (parameter or {}).get("description") or schema.get("description") or ""
    found = [
        template.format(value)
        for source in (schema, *schema.get("anyOf", []))
        for key, template in _CONSTRAINTS.items()
        if (value := source.get(key)) is not None
    ]
    return _cell(" ".join(part for part in (text, "; ".join(found)) if part))


def _cell(text: str) -> str:
    # A character a reader cannot see (a pattern's format characters) is shown by its escape.
    text = text.replace("|", "\\|").replace("\n", " ")
    return "".join(char if char.isprintable() else f"\\U{ord(char):08x}" for char in text)
