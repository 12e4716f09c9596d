"""The one exception a guarded call raises: it carries the contract's envelope."""

from __future__ import annotations

from writesafe.reconciler import CODES, Code, ErrorEnvelope


class WriteSafeError(Exception):
    """A guarded call did not return a result; branch on `.envelope`, not on the message."""

    def __init__(self, envelope: ErrorEnvelope) -> None:
        super().__init__(f"{envelope.code}: {envelope.message}")
        self.envelope = envelope

    @property
    def code(self) -> str:
        return self.envelope.code


def invalid_input(field: str, message: str) -> WriteSafeError:
    """The caller's input cannot be used as given; nothing was recorded or executed."""
    return WriteSafeError(CODES.envelope(Code.INPUT_INVALID, message, field=field))
