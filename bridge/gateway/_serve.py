"""One gateway process: the Bridge (recovering open tasks on start), its runs watched until
they end (:mod:`bridge.gateway._run_ends`), the MCP server as a
Streamable HTTP app at ``/mcp`` behind bearer auth, served by uvicorn on a socket it binds
itself (``--port 0`` + ``--port-file``: :mod:`bridge.uhp.serving._listening`) — or over the
process's stdin/stdout for one principal (:func:`serve_gateway_stdio`)."""

from __future__ import annotations

from pathlib import Path

from mcp.server.stdio import stdio_server

from bridge._config import CredentialResolver
from bridge._facade import Bridge
from bridge._settings import BridgeSettings
from bridge.gateway._auth import GatewayTokens, RequireBearer
from bridge.gateway._calls import GatewayCalls
from bridge.gateway._config import GatewayConfig
from bridge.gateway._server import build_server
from bridge.uhp.serving._listening import listening_socket, uvicorn_server

GRACEFUL_SHUTDOWN_S = 2


async def serve_gateway(
    config: GatewayConfig,
    db_url: str,
    *,
    host: str,
    port: int,
    port_file: Path | None,
    credentials: CredentialResolver,
) -> None:
    """Serve until uvicorn stops (SIGTERM/SIGINT); open tasks stay recorded and watched by
    whichever gateway opens the ledger next."""
    sock = listening_socket(host, port)
    async with Bridge.open(
        BridgeSettings(
            ledger_url=db_url,
            principals=config.principals,
            mcp_servers=config.servers,
            credentials=credentials,
            webhooks=config.webhooks,
        )
    ) as bridge:
        tokens = GatewayTokens(config.token_principals)
        async with GatewayCalls(bridge, config).running() as calls:
            server = build_server(calls, tokens)
            app = RequireBearer(
                server.streamable_http_app(streamable_http_path="/mcp", host=host), tokens
            )
            web = uvicorn_server(
                app, sock, port_file, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S
            )
            await web.serve(sockets=[sock])


async def serve_gateway_stdio(
    config: GatewayConfig, db_url: str, *, principal: str, credentials: CredentialResolver
) -> None:
    """Serve one client over stdin/stdout as ``principal`` until stdin closes (the client
    went away); open tasks stay recorded and watched by whichever gateway opens the ledger
    next."""
    async with Bridge.open(
        BridgeSettings(
            ledger_url=db_url,
            principals=(principal,),
            mcp_servers=config.servers,
            credentials=credentials,
            webhooks=tuple(w for w in config.webhooks if w.principal == principal),
        )
    ) as bridge:
        tokens = GatewayTokens(config.token_principals)
        async with (
            GatewayCalls(bridge, config).running() as calls,
            stdio_server() as (read, write),
        ):
            server = build_server(calls, tokens, fixed_principal=principal)
            await server.run(read, write, server.create_initialization_options())
