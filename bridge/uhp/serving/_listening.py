"""Serving on a socket this process binds, and reporting the port it got (a port handshake).

A parent that picks a "free" port, closes it and hands the number to a child races every other
process on the machine for it. Instead the child binds the port itself (``--port 0``: the OS
picks one) and keeps it, then reports the number it got through ``--port-file PATH``. The file
is written atomically once the app's lifespan has started (the socket already listens, so a
client that reads the file and connects is served), which is what the parent waits for.
A restart passes the port first bound (``--port N``) so URLs recorded elsewhere stay valid.
"""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "ReportPortOnStartup",
    "add_port_arguments",
    "bound_port",
    "check_port_arguments",
    "listening_socket",
    "run_uvicorn",
    "uvicorn_server",
    "write_port_file",
]

BACKLOG = 2048  # uvicorn's default


def add_port_arguments(parser: argparse.ArgumentParser, *, default_port: int = 0) -> None:
    """Add ``--port`` (0: the OS picks one) and ``--port-file`` to a server's command line."""
    parser.add_argument(
        "--port",
        type=int,
        default=default_port,
        help=f"TCP port, 0 for any (default {default_port})",
    )
    parser.add_argument(
        "--port-file",
        type=Path,
        default=None,
        help="write the bound port here (atomically) once the server accepts requests",
    )


def check_port_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse ``--port 0`` without ``--port-file``: nobody could learn where the server is."""
    if args.port == 0 and args.port_file is None:
        parser.error("--port 0 needs --port-file PATH to report the port it bound")


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening, held by this process from now on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # As uvicorn does: a restart on the same port must not wait out TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it. Without it, on a socket handed to uvicorn, small
    # responses wait for the peer's delayed ACK: ~40 ms a request (measured: make bench's
    # call section went from 1.14x to 10.4x the raw SDK before this line).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def write_port_file(path: Path, port: int) -> None:
    """Write ``port`` to ``path`` atomically: a reader sees no file or the whole number."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(f"{port}\n")
    os.replace(partial, path)


class ReportPortOnStartup:
    """Pure ASGI wrapper: writes the port file when the app reports its lifespan started."""

    def __init__(self, app: ASGIApp, *, port: int, port_file: Path | None) -> None:
        self.app = app
        self.port = port
        self.port_file = port_file

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan" or self.port_file is None:
            await self.app(scope, receive, send)
            return
        port_file = self.port_file

        async def reporting_send(message: Message) -> None:
            await send(message)
            if message["type"] == "lifespan.startup.complete":
                write_port_file(port_file, self.port)

        await self.app(scope, receive, reporting_send)


def bound_port(sock: socket.socket) -> int:
    """The port ``sock`` is bound to."""
    return int(sock.getsockname()[1])


def uvicorn_server(
    app: ASGIApp, sock: socket.socket, port_file: Path | None, **config: Any
) -> uvicorn.Server:
    """A uvicorn server for ``app`` on the already bound ``sock``; serve it with ``sockets=``.

    Its ``run`` picks uvloop and httptools (``loop``/``http`` "auto"; why:
    ``bridge.gateway._event_loop``).
    ``serve`` inside a running loop uses that loop (the gateway starts uvloop itself)."""
    wrapped = ReportPortOnStartup(app, port=bound_port(sock), port_file=port_file)
    return uvicorn.Server(uvicorn.Config(wrapped, lifespan="on", **config))


def run_uvicorn(app: ASGIApp, args: argparse.Namespace, host: str, **config: Any) -> None:
    """Serve ``app`` on ``host:args.port`` until SIGTERM, reporting the port bound."""
    sock = listening_socket(host, args.port)
    uvicorn_server(app, sock, args.port_file, **config).run(sockets=[sock])
