"""How the example MCP servers are served: stdio, or HTTP behind an optional bearer token.

The bridge never stores secrets itself: a server config names a credential *reference* and the
harness resolves it into an ``Authorization`` header. These examples show the server side of
that: when a token is configured, every HTTP request must carry ``Authorization: Bearer <token>``
or it is answered ``401`` before it reaches the MCP app. ASGI ``lifespan`` events pass through
untouched; the servers speak no WebSocket, so every other scope is refused too.

This is a demonstration of "a bearer-protected server", not an authorization server: one shared
static token, compared in constant time, no scopes, no OAuth metadata.
"""

from __future__ import annotations

import argparse
import hmac
import os
from typing import TYPE_CHECKING

from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from harness_examples.port_report import check_port_arguments, run_fastmcp

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = [
    "BearerTokenMiddleware",
    "add_token_argument",
    "bearer_middleware",
    "check_transport",
    "resolve_token",
    "serve",
]

REALM = "mcp"


class BearerTokenMiddleware:
    """Pure ASGI middleware: 401 unless ``Authorization: Bearer <token>`` matches."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        if not token:
            raise ValueError("an empty bearer token would protect nothing")
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and self._authorized(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # e.g. a WebSocket: nothing here serves one
            return
        response = JSONResponse(
            {"error": "unauthorized", "error_description": "missing or invalid bearer token"},
            status_code=401,
            headers={"WWW-Authenticate": f'Bearer realm="{REALM}"'},
        )
        await response(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name.lower() != b"authorization":
                continue
            scheme, _, credentials = bytes(value).partition(b" ")
            if scheme.lower() == b"bearer" and hmac.compare_digest(
                credentials.strip(), self._expected
            ):
                return True
        return False


def bearer_middleware(token: str | None) -> list[Middleware]:
    """The Starlette middleware list for ``FastMCP.run(..., middleware=...)`` (empty: open)."""
    return [Middleware(BearerTokenMiddleware, token=token)] if token else []


def add_token_argument(parser: argparse.ArgumentParser, env_var: str) -> None:
    """Add ``--token T`` (default: ``$env_var``) to a server's command line."""
    parser.add_argument(
        "--token",
        default=None,
        type=_non_empty,
        help=f"require 'Authorization: Bearer <token>' on every HTTP request (default: ${env_var})",
    )


def _non_empty(value: str) -> str:
    if not value:
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def resolve_token(cli_value: str | None, env_var: str) -> str | None:
    """``--token`` if given, else the environment variable (unset or empty: no token)."""
    chosen = cli_value if cli_value is not None else os.environ.get(env_var)
    return chosen or None


GRACEFUL_SHUTDOWN_SECONDS = 1  # a parked task must not hold SIGTERM for long


def check_transport(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a token on stdio (no headers there) and HTTP on a port nobody can learn."""
    if args.stdio and args.token is not None:
        parser.error("--token protects HTTP only; stdio has no headers")
    if not args.stdio:
        check_port_arguments(parser, args)


def serve(mcp: FastMCP, args: argparse.Namespace, token_env: str) -> None:
    """Run ``mcp`` over stdio, or Streamable HTTP at ``/mcp`` behind the bearer check."""
    if args.stdio:
        mcp.run(transport="stdio", show_banner=False)
        return
    run_fastmcp(
        mcp,
        args,
        middleware=bearer_middleware(resolve_token(args.token, token_env)),
        graceful_shutdown_s=GRACEFUL_SHUTDOWN_SECONDS,
    )
