"""SSE on the wire: frames (``id:`` / ``event:`` / ``data:`` lines), the keep-alive comment,
the streaming response, and the two request headers a stream depends on.

A UHP event travels as ``id: <sequence_number>`` + ``data: <json>``: the ``id`` is what a
client sends back as ``Last-Event-ID`` to resume after it (streaming chapter).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, Mapping

from starlette.requests import Request
from starlette.responses import StreamingResponse

from bridge.uhp.serving._envelope import invalid_request

#: A comment line: keeps proxies and the client's inactivity timeout from closing a quiet
#: stream (UHP asks for one at least every 30 s).
KEEPALIVE_FRAME = b": keep-alive\n\n"
#: No caching, and no buffering by a proxy (nginx honours X-Accel-Buffering): a stream that
#: arrives all at once at the end is the most common UHP deployment fault.
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
MEDIA_TYPE = "text/event-stream"


def sse_frame(data: str, *, id: int | str | None = None, event: str | None = None) -> bytes:
    """One SSE event; a multi-line ``data`` becomes one ``data:`` line per line."""
    lines = [] if id is None else [f"id: {id}"]
    if event is not None:
        lines.append(f"event: {event}")
    lines.extend(f"data: {line}" for line in data.split("\n"))
    lines.append("\n")
    return "\n".join(lines).encode()


class EventStreamResponse(StreamingResponse):
    """``text/event-stream`` with :data:`STREAM_HEADERS` (extra ``headers`` are added)."""

    media_type = MEDIA_TYPE

    def __init__(
        self, content: AsyncIterable[bytes], *, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(content, headers={**STREAM_HEADERS, **(headers or {})})


def wants_stream(request: Request) -> bool:
    """``GET /v1/responses/{id}`` streams for ``?stream=true`` or ``Accept: text/event-stream``."""
    return request.query_params.get("stream", "").lower() in {"true", "1"} or (
        MEDIA_TYPE in request.headers.get("accept", "")
    )


#: A sequence number as ``Last-Event-ID`` carries it: ASCII digits (``-1``: before the first
#: event), below 2**63 so that every store can hold it (``int()`` alone would also take
#: ``"1_0"``, non-ASCII digits and numbers of any size).
_SEQUENCE_NUMBER = re.compile(r"-1|[0-9]{1,19}")
MAX_SEQUENCE_NUMBER = 2**63 - 1


def resume_start(request: Request) -> int:
    """The first sequence number to send: one past ``Last-Event-ID``, or 0 without one."""
    raw = (request.headers.get("last-event-id") or "").strip()
    if not raw:
        return 0
    if _SEQUENCE_NUMBER.fullmatch(raw) is None or int(raw) >= MAX_SEQUENCE_NUMBER:
        raise invalid_request(
            f"Last-Event-ID {raw[:40]!r} is not a sequence number.", "Last-Event-ID"
        )
    return int(raw) + 1
