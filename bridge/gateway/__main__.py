"""``python -m bridge.gateway --config FILE --db URL [--host 127.0.0.1] [--port N]
[--port-file F] [--metrics HOST:PORT]`` (also ``bridge gateway …``), or ``--stdio
[--principal P]`` to serve one client over stdin/stdout (no bearer there: the principal is
``--principal`` or the config's ``stdioPrincipal``). Upstream tokens come from the
environment (``BRIDGE_CREDENTIAL_<REF>``), like every other bridge command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from bridge._mcp.config_file import McpConfigError, load_mcp_config, resolve_credential
from bridge._telemetry.prometheus import add_metrics_arguments, start_metrics
from bridge.gateway._config import GatewayConfig, GatewayConfigError, parse_gateway_config
from bridge.gateway._event_loop import backend_options
from bridge.gateway._serve import serve_gateway, serve_gateway_stdio
from bridge.uhp.serving._listening import add_port_arguments, check_port_arguments


def load_gateway_config(path: Path) -> GatewayConfig:
    servers = load_mcp_config(path)  # the same file, its "mcpServers" part
    return parse_gateway_config(json.loads(path.read_text(encoding="utf-8")), servers)


def stdio_principal(config: GatewayConfig, option: str | None) -> str:
    """Who a stdio gateway serves: ``--principal``, else the config's ``stdioPrincipal``."""
    chosen = option or config.stdio_principal
    if chosen is None:
        raise GatewayConfigError('--stdio needs --principal or "stdioPrincipal" in the config')
    return config.checked_principal(chosen)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="bridge gateway", description="The bridge as the MCP server of MCP clients."
    )
    parser.add_argument("--config", type=Path, required=True, help="gateway config (JSON)")
    parser.add_argument("--db", required=True, help="ledger: SQLite path or postgresql:// URL")
    parser.add_argument("--host", default="127.0.0.1")
    add_port_arguments(parser, default_port=8765)
    parser.add_argument(
        "--stdio", action="store_true", help="serve one client over stdin/stdout (not HTTP)"
    )
    parser.add_argument("--principal", help="with --stdio: the principal served")
    add_metrics_arguments(parser)
    args = parser.parse_args(argv)
    if not args.stdio:
        if args.principal is not None:
            parser.error("--principal is for --stdio (over HTTP the bearer token decides)")
        check_port_arguments(parser, args)
    try:
        config = load_gateway_config(args.config)
        principal = stdio_principal(config, args.principal) if args.stdio else None
    except McpConfigError as exc:  # the mcpServers part: its message names the file
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except (ValueError, OSError) as exc:
        parser.error(f"{args.config}: {exc}")
    stop_metrics = start_metrics(args)
    try:
        _serve(args, config, principal)
    finally:
        if stop_metrics is not None:
            stop_metrics()


def _serve(args: argparse.Namespace, config: GatewayConfig, principal: str | None) -> None:
    if principal is not None:
        anyio.run(
            lambda: serve_gateway_stdio(
                config, args.db, principal=principal, credentials=resolve_credential
            ),
            backend_options=backend_options(),
        )
        return
    anyio.run(
        lambda: serve_gateway(
            config,
            args.db,
            host=args.host,
            port=args.port,
            port_file=args.port_file,
            credentials=resolve_credential,
        ),
        backend_options=backend_options(),
    )


if __name__ == "__main__":
    main()
