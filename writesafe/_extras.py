"""The one-line error for an integration imported without the extra that brings its framework."""

from __future__ import annotations


class MissingExtra(ModuleNotFoundError):
    """`module` needs `extra` installed: `pip install 'writesafe[extra]'`.

    A `ModuleNotFoundError`, so code that imports an integration optionally (`except ImportError`)
    still works; its message is the one line a person needs, the missing module its `name`.
    """

    def __init__(self, module: str, extra: str, missing: ModuleNotFoundError) -> None:
        super().__init__(
            f"{module} needs the {extra!r} extra: pip install 'writesafe[{extra}]'",
            name=missing.name,
        )
        self.extra = extra
