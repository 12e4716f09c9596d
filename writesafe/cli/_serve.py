"""`writesafe serve APP`: the HTTP service (status, listing, reconciliation, resolution) on uvicorn.

The ledger is checked before the port opens, so a wrong URL or an unmigrated schema stops the
command with its exit code instead of a service that answers 503 to everything.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from writesafe._extras import MissingExtra
from writesafe.cli._exit import ExitCode
from writesafe.cli._loading import fail, load_app
from writesafe.cli._options import AppArgument
from writesafe.cli._runner import run
from writesafe.idempotency import SettingsRefused, WriteSafe, configure_logging

HostOption = Annotated[
    str,
    typer.Option("--host", envvar="WRITESAFE_HOST", help="Interface to listen on (0.0.0.0: all)."),
]
PortOption = Annotated[
    int, typer.Option("--port", envvar="WRITESAFE_PORT", min=1, max=65535, help="TCP port.")
]
LogLevelOption = Annotated[
    str,
    typer.Option(
        "--log-level",
        help="uvicorn's log level: critical, error, warning, info, debug, trace.",
    ),
]

JsonLogsOption = Annotated[
    bool,
    typer.Option(
        "--json-logs",
        envvar="WRITESAFE_JSON_LOGS",
        help="writesafe's own log lines (INFO and up) as JSON, with each operation's key and tool.",
    ),
]

ForwardedAllowIpsOption = Annotated[
    str,
    typer.Option(
        "--forwarded-allow-ips",
        envvar="WRITESAFE_FORWARDED_ALLOW_IPS",
        help="Proxies whose X-Forwarded-For/-Proto are trusted (comma-separated addresses or "
        "networks, * for any). Default: none, so a client cannot name another address.",
    ),
]


def serve(
    app: AppArgument,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    log_level: LogLevelOption = "info",
    json_logs: JsonLogsOption = False,
    forwarded_allow_ips: ForwardedAllowIpsOption = "",
) -> None:
    """Serve the HTTP API for your WriteSafe until SIGINT/SIGTERM (API keys: `writesafe keys`).
    Exit 3 if the ledger cannot be reached, 1 if its schema is not current."""
    try:
        # The service package loads FastAPI (most of a second): only the commands that need it.
        from writesafe.cli._uvicorn import Server
        from writesafe.service import ServiceSettings, create_app
        from writesafe.service._server import server_config
    except MissingExtra as missing:
        raise fail(str(missing), ExitCode.USAGE) from None

    ws = load_app(app)
    if json_logs:
        configure_logging(json=True)
    try:
        settings = ServiceSettings()
    except SettingsRefused as refused:
        raise fail(str(refused), ExitCode.USAGE) from None
    config = server_config(
        create_app(ws, settings),
        settings,
        host=host,
        port=port,
        log_level=log_level.lower(),
        forwarded_allow_ips=forwarded_allow_ips,
    )

    async def serve_until_stopped(ws: WriteSafe) -> None:
        server = Server(config)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, server.stop)
        await ws.start()
        await server.serve()

    run(ws, serve_until_stopped, may_create=True)
