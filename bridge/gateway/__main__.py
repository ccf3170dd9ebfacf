"""``python -m bridge.gateway --config FILE --db URL [--host 127.0.0.1] [--port N]
[--port-file F]`` (also ``bridge gateway …``). Upstream tokens come from the environment
(``BRIDGE_CREDENTIAL_<REF>``), like every other bridge command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from bridge.cli.mcp_commands import load_mcp_config, resolve_credential
from bridge.gateway.config import GatewayConfig, parse_gateway_config
from bridge.gateway.serve import serve_gateway
from harness_examples.port_report import add_port_arguments, check_port_arguments


def load_gateway_config(path: Path) -> GatewayConfig:
    servers = load_mcp_config(path)  # the same file, its "mcpServers" part
    return parse_gateway_config(json.loads(path.read_text(encoding="utf-8")), servers)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="bridge gateway", description="The bridge as the MCP server of MCP clients."
    )
    parser.add_argument("--config", type=Path, required=True, help="gateway config (JSON)")
    parser.add_argument("--db", required=True, help="ledger: SQLite path or postgresql:// URL")
    parser.add_argument("--host", default="127.0.0.1")
    add_port_arguments(parser, default_port=8765)
    args = parser.parse_args(argv)
    check_port_arguments(parser, args)
    try:
        config = load_gateway_config(args.config)
    except (ValueError, OSError) as exc:
        parser.error(f"{args.config}: {exc}")
    except Exception as exc:  # CliError from the mcpServers part
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    anyio.run(
        lambda: serve_gateway(
            config,
            args.db,
            host=args.host,
            port=args.port,
            port_file=args.port_file,
            credentials=resolve_credential,
        )
    )


if __name__ == "__main__":
    main()
