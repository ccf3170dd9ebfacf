"""One console process: a bridge on the ledger (for the principals that have a console token,
with the MCP servers it answers and cancels through) and the console app, served by uvicorn on
a socket it binds itself (``--port 0`` + ``--port-file``: :mod:`bridge.uhp.serving._listening`).

The bridge recovers nothing on start: the harness that runs the calls keeps watching its
tasks; the console only reads, answers, cancels and gives verdicts, and a recovery here could
settle another live process's in-flight calls as unknown."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from bridge._config import CredentialResolver, McpServerConfig
from bridge._facade import Bridge
from bridge._settings import BridgeSettings
from bridge.console._app import build_app
from bridge.console._auth import ConsoleTokens
from bridge.uhp.serving._access_log import scrub_access_log
from bridge.uhp.serving._listening import listening_socket, uvicorn_server

GRACEFUL_SHUTDOWN_S = 2


async def serve_console(
    db_url: str,
    tokens: ConsoleTokens,
    servers: list[McpServerConfig],
    *,
    host: str,
    port: int,
    port_file: Path | None,
    credentials: CredentialResolver,
    thresholds: Mapping[str, float] | None = None,
) -> None:
    """Serve until uvicorn stops (SIGTERM/SIGINT)."""
    sock = listening_socket(host, port)
    scrub_access_log()  # a search's query string never reaches the access log
    settings = BridgeSettings(
        ledger_url=db_url,
        principals=tokens.principals,
        mcp_servers=servers,
        credentials=credentials,
        recover_on_start=False,
    )
    async with Bridge.open(settings) as bridge:
        app = build_app(bridge, tokens, thresholds=thresholds)
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        # The one line an operator needs to find the console (stderr: stdout stays free).
        print(f"bridge console: http://{shown}:{bound_port}/", file=sys.stderr, flush=True)
        web = uvicorn_server(app, sock, port_file, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
        await web.serve(sockets=[sock])
