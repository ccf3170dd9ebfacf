"""``python -m bridge.console --db URL --tokens FILE [--mcp-config FILE]
[--listen HOST:PORT] [--port N] [--port-file F] [--metrics HOST:PORT]`` (also ``bridge
console …``).

Console tokens come from ``--tokens`` (``{"principals": {"alice": {"token_sha256": …}}}``) or
the environment (``BRIDGE_CONSOLE_TOKENS=alice=TOKEN,bob=TOKEN``); MCP server tokens from
``BRIDGE_CREDENTIAL_<REF>``, as for every other bridge command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from bridge._config import McpServerConfig
from bridge._errors import LedgerUnavailable
from bridge._mcp.config_file import McpConfigError, load_mcp_config, resolve_credential
from bridge._telemetry.prometheus import add_metrics_arguments, start_metrics
from bridge.console._auth import TOKENS_ENV, ConsoleAuthError, ConsoleTokens
from bridge.console._serve import serve_console
from bridge.gateway._event_loop import backend_options

DEFAULT_LISTEN = "127.0.0.1:8780"


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``HOST`` alone: the default port)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = value, DEFAULT_LISTEN.rsplit(":", 1)[1]
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and serve the console until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="bridge console", description="The operator web console over a bridge ledger."
    )
    parser.add_argument("--db", required=True, help="ledger: SQLite path or postgresql:// URL")
    parser.add_argument("--tokens", type=Path, help=f"console tokens file (else ${TOKENS_ENV})")
    parser.add_argument(
        "--mcp-config", type=Path, help="MCP servers file: needed to answer and cancel"
    )
    parser.add_argument(
        "--listen", type=parse_listen, default=DEFAULT_LISTEN, help="HOST:PORT to serve on"
    )
    parser.add_argument("--port", type=int, help="port to serve on (overrides --listen's)")
    parser.add_argument(
        "--port-file", type=Path, help="write the bound port here once the console serves"
    )
    parser.add_argument(
        "--overdue-after",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="an input is overdue after SECONDS (as `bridge attention --overdue-after`)",
    )
    parser.add_argument(
        "--orphan-after",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="a silent served run is orphaned after SECONDS (as `bridge attention`)",
    )
    add_metrics_arguments(parser)
    args = parser.parse_args(argv)
    host, port = args.listen
    if args.port is not None:
        port = args.port
    if port == 0 and args.port_file is None:
        parser.error("port 0 needs --port-file PATH to report the port it bound")
    if "://" not in args.db and not Path(args.db).exists():
        print(f"error: no ledger at {args.db} (file not found)", file=sys.stderr)
        raise SystemExit(2)
    try:
        if args.tokens is not None:
            tokens = ConsoleTokens.from_file(args.tokens)
        elif os.environ.get(TOKENS_ENV):
            tokens = ConsoleTokens.from_env(os.environ[TOKENS_ENV])
        else:
            parser.error(f"no console tokens: use --tokens FILE or set {TOKENS_ENV}")
        servers = load_mcp_config(args.mcp_config) if args.mcp_config else []
    except (ConsoleAuthError, McpConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        _serve(args, host, port, tokens, servers)
    except LedgerUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def _serve(
    args: argparse.Namespace,
    host: str,
    port: int,
    tokens: ConsoleTokens,
    servers: list[McpServerConfig],
) -> None:
    stop_metrics = start_metrics(args)
    try:
        _run(args, host, port, tokens, servers)
    finally:
        if stop_metrics is not None:
            stop_metrics()


def _run(
    args: argparse.Namespace,
    host: str,
    port: int,
    tokens: ConsoleTokens,
    servers: list[McpServerConfig],
) -> None:
    anyio.run(
        lambda: serve_console(
            args.db,
            tokens,
            servers,
            host=host,
            port=port,
            port_file=args.port_file,
            credentials=resolve_credential,
            thresholds={"overdue_after": args.overdue_after, "orphan_after": args.orphan_after},
        ),
        backend_options=backend_options(),
    )


if __name__ == "__main__":
    main()
