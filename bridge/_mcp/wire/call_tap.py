"""The HTTP side of :mod:`bridge._mcp.wire.call_listener`: a marked ``tools/call`` POST is
sent without its mark, and its SSE reply is read event by event on the way to the SDK: a
``notifications/message`` is handed to the call's listener, an ``elicitation/create`` gets the
mark in its ``_meta`` (the elicitation callback finds the listener by it). Every other event
passes unchanged."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp_types

from bridge._mcp.wire.call_listener import MARK_META, CallListener, listener_for_mark


def unmarked(request: httpx2.Request) -> tuple[httpx2.Request, str | None]:
    """``request`` without a call mark, and the mark (``None``: not a marked tools/call)."""
    try:
        if request.method != "POST" or b"tools/call" not in request.content:
            return request, None
    except httpx2.RequestNotRead:
        return request, None  # a streamed body: the bridge's own calls are never one
    try:
        body = json.loads(request.content)
        meta = body["params"]["_meta"]
        mark = meta.pop(MARK_META)
    except (ValueError, KeyError, TypeError):
        return request, None
    if not meta:
        del body["params"]["_meta"]
    headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
    content = json.dumps(body, separators=(",", ":")).encode()
    plain = httpx2.Request(
        request.method, request.url, headers=headers, content=content, extensions=request.extensions
    )
    return plain, mark if isinstance(mark, str) else None


class TappedEvents(httpx2.AsyncByteStream):
    """The SSE reply of one marked call (see the module docstring)."""

    def __init__(self, inner: httpx2.AsyncByteStream, mark: str) -> None:
        self._inner = inner
        self._mark = mark

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = b""
        lines: list[bytes] = []
        async for chunk in self._inner:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            out: list[bytes] = []
            for line in complete:
                line = line.rstrip(b"\r")
                if line:
                    lines.append(line)
                    continue
                out.append(b"\n".join(await self._event(lines)) + b"\n\n")
                lines = []
            if out:
                yield b"".join(out)
        rest = [*lines, pending] if pending else lines
        if rest:
            yield b"\n".join(rest)

    async def _event(self, lines: list[bytes]) -> list[bytes]:
        data = [line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:")]
        listener = listener_for_mark(self._mark)
        if not data or listener is None:
            return lines
        try:
            message = json.loads(b"\n".join(data))
        except ValueError:
            return lines  # the SDK reports it
        method = message.get("method") if isinstance(message, dict) else None
        if method == "notifications/message":
            await _log(listener, message.get("params"))
            return lines
        if method != "elicitation/create" or not isinstance(message.get("params"), dict):
            return lines
        params: dict[str, Any] = message["params"]
        params["_meta"] = {**(params.get("_meta") or {}), MARK_META: self._mark}
        kept = [line for line in lines if not line.startswith(b"data:")]
        return [*kept, b"data: " + json.dumps(message, separators=(",", ":")).encode()]

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _log(listener: CallListener, params: object) -> None:
    try:
        parsed = mcp_types.LoggingMessageNotificationParams.model_validate(params)
    except ValueError:
        return  # the SDK reports a malformed notification
    await listener.log(parsed)
