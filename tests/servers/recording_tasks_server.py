"""The bench's fast Tasks server (official SDK) behind a request recorder.

For the lean ``tasks/get`` tests: :class:`RequestRecorder` keeps every POST as it arrived — the
header lines in wire order and the raw body — and serves them at ``GET /recorded``, so a test
can compare what the SDK session path and the lean path put on the wire byte for byte.

Options: ``--sse`` answers ``tasks/get`` as ``text/event-stream`` (the SDK server commits SSE
when its deferral window has elapsed: it is made short here, and ``tasks/get`` slower),
``--notify-on-get`` makes ``tasks/get`` send a ``notifications/tools/list_changed`` on the
request's stream before its reply (an SSE reply with more than the response), and
``--fail-gets N:STATUS`` answers the first N ``tasks/get`` POSTs with a bare HTTP STATUS.
Run: ``python -m tests.servers.recording_tasks_server --port 0 --port-file F [options]``.
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Sequence
from typing import Any

import anyio
import mcp_types
from mcp.server import _streamable_http_modern
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from bench.fast_tasks_server import ParkedTasks, TaskIdParams
from harness_examples.port_report import run_uvicorn
from tests.support.asgi_replay import read_body
from tests.support.server_main import server_arguments

# With --sse: the server's window before it commits to an event stream (15 s by default), and
# tasks/get takes four times as long, so its reply is always a stream (a ping comment first).
SSE_WINDOW_S = 0.05


class RequestRecorder:
    """ASGI middleware: records each POST (header lines, raw body), serves ``GET /recorded``."""

    def __init__(self, app: ASGIApp, fail_gets: int = 0, fail_status: int = 404) -> None:
        self.app = app
        self.records: list[dict[str, Any]] = []
        self.fail_gets = fail_gets
        self.fail_status = fail_status

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "GET" and scope["path"] == "/recorded":
            await _respond(send, 200, "application/json", json.dumps(self.records).encode())
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, replay = await read_body(receive)
        headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]
        self.records.append({"headers": headers, "body": base64.b64encode(body).decode()})
        if self.fail_gets > 0 and (b'"method":"tasks/get"' in body):
            self.fail_gets -= 1
            await _respond(send, self.fail_status, "text/plain", b"nope")
            return
        await self.app(scope, replay, send)


async def _respond(send: Send, status: int, content_type: str, body: bytes) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class RecordingTasks(ParkedTasks):
    """``tasks/get`` that may first send a notification on the request's own stream, and may
    take longer than the server's SSE deferral window (so the reply is an event stream)."""

    def __init__(self, notify: bool, delay_s: float) -> None:
        super().__init__(poll_interval_ms=1000)
        self.notify = notify
        self.delay_s = delay_s

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        if self.notify:
            notification = mcp_types.ToolListChangedNotification()
            await ctx.session.send_notification(notification, related_request_id=ctx.request_id)
        if self.delay_s:
            await anyio.sleep(self.delay_s)
        return await super().get(ctx, params)


def main(argv: Sequence[str] | None = None) -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--sse", action="store_true")
        parser.add_argument("--notify-on-get", action="store_true")
        parser.add_argument("--fail-gets", default="0:404", help="N:STATUS")

    args = server_arguments(__doc__.splitlines()[0] if __doc__ else None, argv, options)
    if args.sse:
        _streamable_http_modern._SSE_PING_INTERVAL = SSE_WINDOW_S
    extension = RecordingTasks(args.notify_on_get, 4 * SSE_WINDOW_S if args.sse else 0.0)
    server = MCPServer("recording-tasks", extensions=[extension])
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    count, status = (int(part) for part in args.fail_gets.split(":"))
    run_uvicorn(RequestRecorder(app, count, status), args, args.host, log_level="warning")


if __name__ == "__main__":
    main()
