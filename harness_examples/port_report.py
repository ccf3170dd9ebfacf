"""The server side of :mod:`harness_examples.launch`'s port handshake: the bridge's own
(:mod:`bridge.uhp.serving._listening`), and FastMCP's ``run`` handed the socket bound here."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from starlette.middleware import Middleware

from bridge.uhp.serving import (
    BACKLOG,
    ReportPortOnStartup,
    add_port_arguments,
    bound_port,
    check_port_arguments,
    listening_socket,
    run_uvicorn,
    uvicorn_server,
    write_port_file,
)

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = [
    "BACKLOG",
    "ReportPortOnStartup",
    "add_port_arguments",
    "bound_port",
    "check_port_arguments",
    "listening_socket",
    "run_fastmcp",
    "run_uvicorn",
    "uvicorn_server",
    "write_port_file",
]


def run_fastmcp(
    mcp: FastMCP,
    args: argparse.Namespace,
    *,
    middleware: Sequence[Middleware] = (),
    graceful_shutdown_s: float,
) -> None:
    """Serve ``mcp`` as Streamable HTTP at ``/mcp`` on ``args.host:args.port``, reporting the
    port to ``args.port_file`` (FastMCP's own ``run``, handed the socket bound here)."""
    sock = listening_socket(args.host, args.port)
    report = Middleware(ReportPortOnStartup, port=bound_port(sock), port_file=args.port_file)
    mcp.run(
        transport="http",
        host=args.host,
        port=bound_port(sock),
        path="/mcp",
        show_banner=False,
        middleware=[report, *middleware],
        uvicorn_config={"timeout_graceful_shutdown": graceful_shutdown_s},
        sockets=[sock],
    )
