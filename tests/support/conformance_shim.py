"""What the official MCP conformance suite cannot say to ``bridge gateway`` itself, said for it:
a loopback HTTP proxy (an in-repo adapter, named as such) that adds the gateway client's bearer
token and maps the suite's tool names onto the gateway's ``<server>__<tool>`` ones.

The suite's ``server --url`` sends no headers of its own and calls its scenarios' tools by
their bare names (``test_simple_text``); a gateway client is configured with a token and sees
``conf__test_simple_text``. Everything else passes through unchanged, both ways, streamed
(SSE responses event by event): a ``tools/call``'s name (and its ``Mcp-Name`` header) gains the
prefix, a ``tools/list`` result's names lose it.

Run as ``python -m tests.support.conformance_shim --upstream URL --token T --prefix conf__
--port 0 --port-file F``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from harness_examples.port_report import (
    add_port_arguments,
    bound_port,
    check_port_arguments,
    listening_socket,
    write_port_file,
)

_HOP_BY_HOP = {"host", "content-length", "transfer-encoding", "connection", "authorization"}


def _renamed_call(message: Any, prefix: str) -> Any:
    if isinstance(message, dict) and message.get("method") == "tools/call":
        params = message.get("params")
        if isinstance(params, dict) and isinstance(params.get("name"), str):
            params["name"] = prefix + params["name"]
    return message


def _renamed_listing(message: Any, prefix: str) -> Any:
    result = message.get("result") if isinstance(message, dict) else None
    tools = result.get("tools") if isinstance(result, dict) else None
    for tool in tools if isinstance(tools, list) else []:
        name = tool.get("name") if isinstance(tool, dict) else None
        if isinstance(name, str) and name.startswith(prefix):
            tool["name"] = name.removeprefix(prefix)
    return message


def _map_json(body: bytes, prefix: str, rename: Any) -> bytes:
    try:
        parsed = json.loads(body)
    except ValueError:
        return body  # not JSON: the gateway's (or the suite's) own business
    if isinstance(parsed, list):
        return json.dumps([rename(m, prefix) for m in parsed]).encode()
    return json.dumps(rename(parsed, prefix)).encode()


async def _mapped_sse(lines: AsyncIterator[str], prefix: str) -> AsyncIterator[bytes]:
    async for line in lines:
        if line.startswith("data:"):
            data = _map_json(line[5:].strip().encode(), prefix, _renamed_listing).decode()
            line = f"data: {data}"
        yield (line + "\n").encode()


def build_app(upstream: str, token: str, prefix: str) -> Starlette:
    client = httpx.AsyncClient(timeout=httpx.Timeout(None))

    async def forward(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["authorization"] = f"Bearer {token}"
        headers["host"] = request.headers.get("host", "")
        if "mcp-name" in headers and headers.get("mcp-method") == "tools/call":
            headers["mcp-name"] = prefix + headers["mcp-name"]
        body = await request.body()
        if body:
            body = _map_json(body, prefix, _renamed_call)
        sent = client.build_request(request.method, upstream, headers=headers, content=body)
        reply = await client.send(sent, stream=True)
        out_headers = {k: v for k, v in reply.headers.items() if k.lower() not in _HOP_BY_HOP}
        kind = reply.headers.get("content-type", "")
        if kind.startswith("text/event-stream"):
            return StreamingResponse(
                _mapped_sse(reply.aiter_lines(), prefix),
                status_code=reply.status_code,
                headers=out_headers,
                background=BackgroundTask(reply.aclose),
            )
        content = await reply.aread()
        await reply.aclose()
        if kind.startswith("application/json"):
            content = _map_json(content, prefix, _renamed_listing)
        return Response(content, status_code=reply.status_code, headers=out_headers)

    methods = ["GET", "POST", "DELETE"]
    return Starlette(routes=[Route("/mcp", forward, methods=methods)])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_port_arguments(parser)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args(argv)
    check_port_arguments(parser, args)
    sock = listening_socket("127.0.0.1", args.port)
    write_port_file(args.port_file, bound_port(sock))
    config = uvicorn.Config(build_app(args.upstream, args.token, args.prefix), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
