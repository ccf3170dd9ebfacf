"""A UHP-shaped SSE emitter for the stream-following benchmark (Starlette).

``POST /v1/responses`` with ``{"input": "events=N"}`` streams ``response.created``, N text
deltas and ``response.completed`` as fast as the socket takes them, in chunks, so the client
side is what the benchmark measures. Run: ``python -m bench.sse_server --port P``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator, Sequence

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from harness_examples.port_report import add_port_arguments, check_port_arguments, run_uvicorn

CHUNK = 200  # events per write


def _response(status: str) -> dict[str, object]:
    return {
        "id": "resp_bench",
        "object": "response",
        "created_at": 0,
        "status": status,
        "error": None,
        "output": [],
        "model": "scripted",
        "usage": None,
        "metadata": {"session_id": "hsess_bench", "harness_id": "chrn_bench"},
    }


def _frame(seq: int, event: dict[str, object]) -> str:
    event["sequence_number"] = seq
    return f"id: {seq}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"


async def _events(count: int) -> AsyncIterator[bytes]:
    frames = [_frame(0, {"type": "response.created", "response": _response("in_progress")})]
    for n in range(count):
        delta = {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": f"w{n} ",
        }
        frames.append(_frame(n + 1, delta))
        if len(frames) >= CHUNK:
            yield "".join(frames).encode()
            frames = []
    frames.append(
        _frame(count + 1, {"type": "response.completed", "response": _response("completed")})
    )
    yield "".join(frames).encode()


async def create(request: Request) -> StreamingResponse:
    body = await request.json()
    count = int(str(body.get("input", "events=1000")).split("=", 1)[1])
    return StreamingResponse(
        _events(count),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "UHP-Version": "2026-09-28"},
    )


async def read(request: Request) -> JSONResponse:
    return JSONResponse(_response("completed"), headers={"UHP-Version": "2026-09-28"})


app = Starlette(
    routes=[
        Route("/v1/responses", create, methods=["POST"]),
        Route("/v1/responses/{response_id}", read, methods=["GET"]),
    ]
)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="SSE emitter for the stream benchmark.")
    add_port_arguments(parser)
    args = parser.parse_args(argv)
    check_port_arguments(parser, args)
    run_uvicorn(app, args, "127.0.0.1", log_level="warning")


if __name__ == "__main__":
    main()
