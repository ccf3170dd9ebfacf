"""An HTTP transport that keeps one request's failure to that request.

The SDK runs every request of a server connection as a task in one shared task group: an
exception from one POST (the server dropping the connection, a read timeout, a protocol error)
cancels the group and with it every concurrent call on that connection, whose outcomes then
become unknown although their servers answered. This transport sits under the SDK's httpx
client and turns such a failure into that one request's own JSON-RPC error instead:

- a transport failure before the response headers arrive becomes a ``-32000`` (connection
  closed) error for that request: no answer, so its outcome is unknown;
- a failure while reading the body surfaces as a stream error, which the SDK reports for that
  request alone (``-32700`` "Failed to parse JSON response", or an ended SSE stream);
- ``404`` to a request carrying an ``Mcp-Session-Id`` (a handshake-era server that restarted
  and forgot the session) retires the connection, so the next request initializes a new
  session, and becomes a ``-32000`` error for that request;
- ``429`` and ``503`` become a ``-32000`` error whose ``data`` carries the HTTP status and the
  server's ``Retry-After`` (in ms, capped at :data:`RETRY_AFTER_CAP_MS`), so polls wait as long
  as the server asked and a consequential call is still reported as unknown, never repeated;
- ``502`` and ``504`` without a JSON body (a gateway that could not reach the server, as during
  a restart behind a proxy) become the same error: nobody who knows MCP answered;
- ``401`` and ``403`` become a ``-32000`` error whose ``data`` carries the HTTP status, so a
  connect refused for its credentials is told apart from any other failure
  (:class:`~bridge.errors.ServerCredentialsRejected`);
- a failure to connect names its cause in the error's ``data`` as one word (``tls``, ``dns``,
  ``refused``: :func:`connect_cause`), never the exception's text (it may quote headers);
- a stream resumed (``GET`` with ``Last-Event-ID``) from the same event id more than
  :data:`MAX_RESUMES_WITHOUT_PROGRESS` times within :data:`RESUME_WINDOW_S` is refused here,
  without a connection (a quiet stream a server ends now and then is resumed as before): the SDK
  resumes a response stream that ended without its response, and starts over each time the
  server accepts and ends it again without sending anything, a connection a second for as
  long as the request waits. Refused, the SDK gives up after its own few attempts and ends
  the request (its outcome unknown, as at a timeout).

A normal response passes through untouched except for the body wrapper (one extra async frame).
"""

from __future__ import annotations

import json
import math
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from email.utils import parsedate_to_datetime
from typing import Any

import httpx2
import mcp_types

from bridge._mcp.wire.call_tap import TappedEvents, unmarked

# A server may ask for any delay; the bridge waits at most this long before polling again (a
# task's TTL backstop still runs), so a hostile Retry-After cannot park a handle for days.
RETRY_AFTER_CAP_MS = 60_000
# Marks the data of an error this transport made (it never came from the server).
SYNTHETIC_KEY = "bridge.transport"
_RETRY_STATUSES = frozenset({429, 503})
_GATEWAY_STATUSES = frozenset({502, 504})
CREDENTIAL_STATUSES = frozenset({401, 403})
_SESSION_HEADER = "mcp-session-id"
_LAST_EVENT_ID = "last-event-id"
# Resumes from one event id that brought nothing new; then the stream is abandoned.
MAX_RESUMES_WITHOUT_PROGRESS = 2
RESUME_WINDOW_S = 10.0  # resumes further apart than this are a quiet stream, not a loop
_RESUMES_KEPT = 1024  # event ids remembered (oldest forgotten first)


def retry_after_ms(value: str | None, now_s: float) -> int | None:
    """``Retry-After`` (delta-seconds or an HTTP date) in ms, capped; ``None`` if absent/bad."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - now_s
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if math.isnan(seconds):
        return None
    return int(min(max(seconds * 1000, 0), RETRY_AFTER_CAP_MS))


def connect_cause(exc: BaseException) -> str | None:
    """Why a request got no response, as one word: ``tls`` (handshake or certificate),
    ``dns`` (the name did not resolve), ``refused`` (nothing listens), or ``None``. Follows
    the exceptions each HTTP engine chains (``__cause__``, aiohttp's ``os_error`` and
    ``certificate_error``)."""
    stack: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):  # certificate errors are SSLErrors too
            return "tls"
        if isinstance(current, socket.gaierror):
            return "dns"
        if isinstance(current, ConnectionRefusedError):
            return "refused"
        stack.extend((current.__cause__, current.__context__))
        stack.extend(
            value
            for value in (
                getattr(current, "os_error", None),
                getattr(current, "certificate_error", None),
            )
            if isinstance(value, BaseException)
        )
    return None


def _error_body(message: str, data: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": None,  # the SDK puts the request's own id on it
        "error": {
            "code": mcp_types.CONNECTION_CLOSED,
            "message": message,
            "data": {SYNTHETIC_KEY: data},
        },
    }


def _is_json(content_type: str | None) -> bool:
    return content_type is not None and content_type.lower().startswith("application/json")


def _error_response(request: httpx2.Request, status: int, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.Response(
        status,
        headers={"content-type": "application/json"},
        content=json.dumps(body).encode(),
        request=request,
    )


class _BodyGuard(httpx2.AsyncByteStream):
    """Re-raises a transport failure inside the body as a stream error (per request)."""

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx2.TransportError as exc:
            raise httpx2.StreamClosed() from exc

    async def aclose(self) -> None:
        await self._inner.aclose()


class IsolatingTransport(httpx2.AsyncBaseTransport):
    """Wraps the real transport; see the module docstring."""

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        *,
        on_failure: Callable[[], None] | None = None,
        clock_s: Callable[[], float] = time.time,
    ) -> None:
        self._inner = inner
        self._on_failure = on_failure  # the connection may be gone: new requests reconnect
        self._now_s = clock_s
        # Last-Event-ID -> (resumes, when the first of them was made)
        self._resumes: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def abandoned(self, request: httpx2.Request) -> bool:
        """Whether ``request`` resumes a stream from an event id already resumed from
        :data:`MAX_RESUMES_WITHOUT_PROGRESS` times within :data:`RESUME_WINDOW_S` (the server
        accepted each and sent nothing after it)."""
        resumed_from = request.headers.get(_LAST_EVENT_ID)
        if request.method != "GET" or resumed_from is None:
            return False
        now = self._now_s()
        seen, since = self._resumes.pop(resumed_from, (0, now))
        if now - since > RESUME_WINDOW_S:
            seen, since = 0, now
        seen += 1
        self._resumes[resumed_from] = (seen, since)
        while len(self._resumes) > _RESUMES_KEPT:
            self._resumes.popitem(last=False)
        return seen > MAX_RESUMES_WITHOUT_PROGRESS

    def failed(self, exc: httpx2.TransportError) -> dict[str, Any]:
        """The JSON-RPC error body for a request that got no response (the connection is
        retired: the next request reconnects)."""
        if self._on_failure is not None:
            self._on_failure()
        # Only the exception's type: its text may quote request headers (Mcp-Name).
        detail: dict[str, Any] = {"error": type(exc).__name__}
        cause = connect_cause(exc)
        if cause is not None:
            detail["cause"] = cause
        return _error_body(f"transport failure: {type(exc).__name__}", detail)

    def refused(
        self, status: int, header: Callable[[str], str | None], *, had_session: bool
    ) -> dict[str, Any] | None:
        """The JSON-RPC error body for a response that is no answer (see the module
        docstring), or ``None`` for a response that passes through. ``header`` looks up one
        of the response's headers (only read for the statuses that need one)."""
        if status < 400:
            return None
        if status == 404 and had_session:
            # Handshake-era servers (2025-11-25 and before) keep a session; after a restart
            # they answer 404 to its id, and the client MUST initialize a new one: the
            # connection is retired (the next request reconnects) and this request had no
            # answer from anyone who knew its session.
            if self._on_failure is not None:
                self._on_failure()
            expired = {"httpStatus": 404, "sessionExpired": True}
            return _error_body("MCP session no longer known to the server", expired)
        if status in CREDENTIAL_STATUSES:
            return _error_body(f"HTTP {status} from server", {"httpStatus": status})
        gateway = status in _GATEWAY_STATUSES and not _is_json(header("content-type"))
        if status in _RETRY_STATUSES or gateway:
            delay = retry_after_ms(header("retry-after"), self._now_s())
            data = {"httpStatus": status, "retryAfterMs": delay}
            return _error_body(f"HTTP {status} from server", data)
        return None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.abandoned(request):  # not sent: the SDK counts it as a failed resume
            return httpx2.Response(410, request=request)
        request, mark = unmarked(request)
        try:
            response = await self._inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            return _error_response(request, 502, self.failed(exc))
        status = response.status_code
        refusal = self.refused(
            status,
            response.headers.get,
            had_session=bool(request.headers.get(_SESSION_HEADER)),
        )
        if refusal is not None:
            await response.aclose()
            return _error_response(request, status, refusal)
        stream = response.stream
        if isinstance(stream, httpx2.AsyncByteStream):
            response.stream = _BodyGuard(stream)
            if mark is not None and "text/event-stream" in response.headers.get("content-type", ""):
                response.stream = TappedEvents(response.stream, mark)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
