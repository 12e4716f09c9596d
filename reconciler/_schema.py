"""The published JSON Schema of `writesafe.error/1` (docs/schema/writesafe.error.1.json).

It describes envelopes as writesafe emits them: every member present, `null` where empty.
Readers of foreign envelopes (`read_envelope`) accept omitted optional members.
"""

from __future__ import annotations

from typing import Any

from writesafe.reconciler._contract import ErrorEnvelope

SCHEMA_ID = "tag:writesafe,2026:schema/writesafe.error/1"
"""An identifier, not a location (like the problem types)."""


def envelope_json_schema() -> dict[str, Any]:
    """The envelope's JSON Schema (draft 2020-12), generated from the model."""
    generated = ErrorEnvelope.model_json_schema(by_alias=True, mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **generated,
        "title": "writesafe.error/1",
    }
