"""What counts as "a store could not be reached" for the CLI's exit code 3."""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError


def unavailable_errors() -> tuple[type[BaseException], ...]:
    return (SQLAlchemyError, OSError, TimeoutError)
