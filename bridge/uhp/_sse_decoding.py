"""SSE decoding a whole network chunk at a time, on httpx-sse's own (private) decoders.

Why a private import: ``httpx_sse.EventSource.aiter_sse`` drives its line and event decoders
through one async generator hop per line; on the stream follower's path each hop costs as much
as parsing the event, so the public API runs well behind the chunk-at-a-time loop below (the
follower is benchmarked at parity with plain httpx-sse only because of it). The decoders are
``httpx_sse._decoders.SSELineDecoder`` / ``SSEDecoder``, not public API, so this module is the
only place that touches them, checks at import that they still have the shape relied on, and
fails with :class:`SseDecodingUnavailable` naming the supported httpx-sse range if they moved.
``tests/test_uhp_sse_decoding.py`` pins the behaviour the follower relies on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version

import httpx
from httpx_sse import ServerSentEvent

from bridge._errors import BridgeError

#: The httpx-sse releases whose private decoders this module was written against (the same
#: range as the pin in pyproject.toml).
SUPPORTED_HTTPX_SSE = ">=0.4.3,<0.5"


class SseDecodingUnavailable(BridgeError, ImportError):
    """The installed httpx-sse no longer has the private decoders the follower drives."""


def _unavailable(why: str) -> SseDecodingUnavailable:
    try:
        installed = version("httpx-sse")
    except PackageNotFoundError:  # pragma: no cover - httpx_sse imported above
        installed = "unknown"
    return SseDecodingUnavailable(
        f"bridge.uhp needs httpx-sse{SUPPORTED_HTTPX_SSE} (installed: {installed}): {why}. "
        f"Install a supported httpx-sse release."
    )


try:
    from httpx_sse._decoders import SSEDecoder, SSELineDecoder
except ImportError as exc:  # pragma: no cover - only with an unsupported httpx-sse
    raise _unavailable(f"httpx_sse._decoders has no SSEDecoder/SSELineDecoder ({exc})") from exc

for _cls, _methods in ((SSELineDecoder, ("decode", "flush")), (SSEDecoder, ("decode",))):
    _missing = [m for m in _methods if not callable(getattr(_cls, m, None))]
    if _missing:  # pragma: no cover - only with an unsupported httpx-sse
        raise _unavailable(f"httpx_sse._decoders.{_cls.__name__} lacks {', '.join(_missing)}")


async def sse_frames(source: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    """The SSE events of a response, decoded a whole network chunk at a time.

    httpx-sse's own line and event decoders, driven per chunk instead of through its per-line
    async generators. Comments and blank keep-alives come out as events with empty ``data``
    only where the SSE rules dispatch one (httpx-sse's behaviour).
    """
    lines = SSELineDecoder()
    frames = SSEDecoder()
    async for text in source.aiter_text():
        for line in lines.decode(text):
            frame = frames.decode(line)
            if frame is not None:
                yield frame
    for line in lines.flush():
        frame = frames.decode(line)
        if frame is not None:
            yield frame


__all__ = ["SUPPORTED_HTTPX_SSE", "SseDecodingUnavailable", "sse_frames"]
