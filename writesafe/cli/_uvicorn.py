"""uvicorn for `writesafe serve`, from the `service` extra: loaded only by that command."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from writesafe._extras import MissingExtra

try:
    import uvicorn
except ModuleNotFoundError as missing:
    raise MissingExtra("writesafe serve", "service", missing) from missing


class Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after its graceful shutdown, which kills the process before the
    ledger is closed; the command stops the server on its own signal handlers instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def stop(self) -> None:
        # The first signal drains the connections; a second one stops at once.
        self.force_exit = self.should_exit
        self.should_exit = True
