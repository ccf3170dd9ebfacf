"""The real Tasks server of ``tests.servers.tasks_server`` (FastMCP + fastmcp-tasks) plus one
consequential tool, ``place_order``, that honours a duplicate-prevention key, and a switch that
loses its replies on the way back.

``place_order`` records one effect per new key (in the effects file, like every tool of that
server); a ``tools/call`` whose ``params._meta`` carries an operation id under
:data:`OPERATION_META_KEY` that was seen before does nothing again and answers as the first
time did. ``drop_replies(count)`` makes the next ``count`` ``place_order`` calls run on the
server (their effect happens) while their reply is cut off mid-body: the client sent the
request and learns nothing, an unknown outcome. Run like ``tests.servers.tasks_server``
(HTTP only): ``python -m tests.servers.orders_server --port 0 --port-file F --effects-file E``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from fastmcp import Context
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.servers import tasks_server
from tests.servers.tasks_server import mcp, record
from tests.support.server_main import serve_main

OPERATION_META_KEY = "com.example.orders/operation-id"

_orders: dict[str, str] = {}  # operation id -> the answer it got the first time
_drops = {"remaining": 0}


@mcp.tool(annotations={"destructiveHint": True, "idempotentHint": False})
async def place_order(item: str, ctx: Context) -> str:
    """Consequential: one effect per order, none for an operation id already applied."""
    meta = ctx.request_context.meta if ctx.request_context is not None else None
    key = (meta or {}).get(OPERATION_META_KEY)
    if isinstance(key, str) and key in _orders:
        return _orders[key]
    record(f"order {item}")
    answer = f"ordered {item}"
    if isinstance(key, str):
        _orders[key] = answer
    return answer


@mcp.tool
async def drop_replies(count: int) -> str:
    """Cut off the replies of the next ``count`` place_order calls (after they ran)."""
    _drops["remaining"] = count
    return f"dropping {count}"


class DropReplies:
    """ASGI middleware: while armed, a ``tools/call`` of ``place_order`` is handled in full,
    then its reply is replaced by a cut-off body and a dropped connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", []))
        armed = _drops["remaining"] > 0 and scope["type"] == "http"
        is_order = (
            headers.get(b"mcp-method") == b"tools/call"
            and headers.get(b"mcp-name") == b"place_order"
        )
        if not (armed and is_order):
            await self.app(scope, receive, send)
            return
        _drops["remaining"] -= 1

        async def swallow(_message: Message) -> None:
            return None

        await self.app(scope, receive, swallow)  # the tool runs: its effect is recorded
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"100")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"jsonrpc"', "more_body": True})
        raise ConnectionAbortedError("orders server: reply dropped after the order was placed")


def main(argv: Sequence[str] | None = None) -> None:
    def setup(args: argparse.Namespace) -> list[Middleware]:
        tasks_server.set_effects_file(args.effects_file)
        return [Middleware(DropReplies)]

    serve_main(
        mcp,
        argv,
        description=__doc__.splitlines()[0],
        options=lambda parser: parser.add_argument("--effects-file", default=None),
        setup=setup,
        graceful_shutdown_s=tasks_server.GRACEFUL_SHUTDOWN_SECONDS,
    )


if __name__ == "__main__":
    main()
