"""The command line every test server shares: ``--port``, ``--port-file``, loopback ``--host``."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from starlette.middleware import Middleware

from harness_examples.port_report import add_port_arguments, check_port_arguments, run_fastmcp

if TYPE_CHECKING:
    from fastmcp import FastMCP

LOOPBACK = "127.0.0.1"


def server_arguments(
    description: str | None,
    argv: Sequence[str] | None,
    options: Callable[[argparse.ArgumentParser], object] | None = None,
) -> argparse.Namespace:
    """Parse a test server's arguments; refuse any host but loopback and an unreported port 0.

    ``options`` adds the server's own arguments. A ``--stdio`` server binds no port, so the
    port check is skipped for it."""
    parser = argparse.ArgumentParser(description=description)
    add_port_arguments(parser)
    parser.add_argument("--host", default=LOOPBACK)
    if options is not None:
        options(parser)
    args = parser.parse_args(argv)
    if args.host != LOOPBACK:
        parser.error(f"this test server binds {LOOPBACK} only")
    if not getattr(args, "stdio", False):
        check_port_arguments(parser, args)
    return args


def serve_main(
    mcp: FastMCP,
    argv: Sequence[str] | None,
    *,
    description: str | None,
    options: Callable[[argparse.ArgumentParser], object] | None = None,
    setup: Callable[[argparse.Namespace], Sequence[Middleware]] | None = None,
    graceful_shutdown_s: float = 1.0,
) -> None:
    """A FastMCP test server's ``main``: parse, run ``setup`` (which may return middleware),
    then serve over stdio (``--stdio``) or Streamable HTTP with the port handshake.

    The graceful shutdown is short: an open request must not hold up SIGTERM (tests stop
    servers often)."""
    args = server_arguments(description, argv, options)
    middleware = setup(args) if setup is not None else ()
    if getattr(args, "stdio", False):
        mcp.run(transport="stdio", show_banner=False)
        return
    run_fastmcp(mcp, args, middleware=middleware, graceful_shutdown_s=graceful_shutdown_s)
