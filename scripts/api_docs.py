"""Write docs/api.md from the service's OpenAPI document (`--check`: exit 1 if it is stale)."""

from __future__ import annotations

import sys
from pathlib import Path

from writesafe import WriteSafe
from writesafe.service import create_app, render_markdown

TARGET = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def current() -> str:
    # The OpenAPI document does not depend on the ledger; this WriteSafe never connects.
    return render_markdown(create_app(WriteSafe()).openapi())


if __name__ == "__main__":
    text = current()
    if "--check" in sys.argv:
        sys.exit(0 if TARGET.exists() and TARGET.read_text() == text else 1)
    TARGET.parent.mkdir(exist_ok=True)
    TARGET.write_text(text)
