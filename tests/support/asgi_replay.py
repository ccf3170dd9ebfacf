"""Read an ASGI request's body in a middleware, then hand the app the request unchanged."""

from __future__ import annotations

from starlette.types import Message, Receive


async def read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The whole body, and a ``receive`` that gives the app that body first, then the real
    channel (the app may wait for the disconnect)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return body, replay
